"""Prefill/decode (PD) serving profiles: they follow vllm-ascend v0.23.0's PD tutorials, every
refusal of check_pd fires when a profile is loaded (both values and the fix in the message), and
each host's launcher runs its ranks with vllm_serve_argv's command lines."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.serving import launcher
from ascend_serve.serving import pd as pd_layout
from ascend_serve.serving.pd_launch import host_script, rank_argvs, side_profile
from ascend_serve.serving.profiles import ProfileError, load_profiles, resolve
from ascend_serve.serving.router import RouterPlanError, rank_workers, transport_ports

runner = CliRunner()

V31 = "deepseek-v3.1-pd-2p1d-a3"
V32 = "deepseek-v3.2-pd-1p1d-a3"
V4F = "deepseek-v4-flash-pd-1p1d-a3"
V4P = "deepseek-v4-pro-pd-1p1d-a3"


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


# (tutorial section, connector, (P engines, P dp, P tp, P hosts), (D engines, D dp, D tp,
#  D hosts), the tutorial's kv_ports, engine ids) - VA @v0.23.0, read from the tutorials.
TUTORIALS: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...], list[int],
                           list[str] | None]] = {
    V31: ("DeepSeek-V3.1.md", "MooncakeConnectorV1", (2, 2, 8, 1), (1, 32, 1, 2),
          [30000, 30100, 30200], None),
    V32: ("DeepSeek-V3.2.md", "MooncakeConnectorV1", (1, 2, 16, 2), (1, 8, 4, 2),
          [30000, 30100], None),
    V4F: ("DeepSeek-V4-Flash.md", "MooncakeHybridConnector", (1, 4, 4, 1), (1, 16, 1, 1),
          [30000, 30100], ["0", "1"]),
    V4P: ("DeepSeek-V4-Pro.md", "MooncakeHybridConnector", (1, 2, 16, 2), (1, 16, 2, 2),
          [30200, 30800], ["1", "8"]),
}


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_pd_profiles_follow_their_tutorials_with_kv_ports_out_of_the_transport(
        name: str) -> None:
    path, connector, prefill, decode, tutorial_ports, ids = TUTORIALS[name]
    profile = load_profiles()[name]
    layout = profile.pd
    assert layout is not None and profile.tutorial is not None
    assert profile.tutorial.path.endswith(path) and profile.tutorial.tag == "v0.23.0"
    assert layout.connector == connector
    for side, want in (("prefill", prefill), ("decode", decode)):
        part = layout.side(side)
        assert (part.engines, part.data, part.tensor, part.nodes) == want, side
    assert profile.nodes == prefill[0] * prefill[3] + decode[0] * decode[3]
    engines = pd_layout.engines(layout, profile.chips_per_node)
    expected_ids: list[str | None] = list(ids) if ids else [None] * len(engines)
    assert [e.engine_id for e in engines] == expected_ids
    # The tutorial's ports lie inside the transport's range on an A3 node (16 NPUs); the
    # profile's do not, and each difference says so.
    reserved = transport_ports(profile.chips_per_node)
    assert (reserved.start, reserved.stop) == (20000, 36000)
    assert all(reserved.start <= p < reserved.stop for p in tutorial_ports)
    assert all(e.kv_port >= reserved.stop for e in engines)
    assert any("[20000, 36000)" in d for d in profile.differences)
    # A worker is a host x rank port.
    assert len(pd_layout.workers(engines)[1]) == decode[0] * decode[1]


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_the_tutorials_own_kv_ports_are_refused_with_both_values_and_the_fix(
        name: str) -> None:
    profile = load_profiles()[name]
    assert profile.pd is not None
    ports = iter(TUTORIALS[name][4])
    overrides = {side: {"kv_ports": [next(ports) for _ in range(profile.pd.side(side).engines)]}
                 for side in pd_layout.SIDES}
    with pytest.raises(ProfileError) as info:
        resolve(name, {"pd": overrides})
    message = str(info.value)
    first = TUTORIALS[name][4][0]
    assert f"(kv_port {first}) overlap the Ascend transport's [20000, 36000) for 16 NPUs" in message
    assert "set kv_port to 36000 or more" in message


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"pd": {"extra_config": {"prefill": {"dp_size": 2, "tp_size": 8},
                              "decode": {"dp_size": 16, "tp_size": 1}}}},
     'kv_connector_extra_config decode {"dp_size": 16, "tp_size": 1} but decode engine '
     'decode-0 runs dp_size 32, tp_size 1: set decode to {"dp_size": 32, "tp_size": 1}'),
    ({"pd": {"extra_config": {"prefill": {"dp_size": 2, "tp_size": 8}}}},
     "kv_connector_extra_config has no 'decode' entry"),
    ({"pd": {"prefill": {"engine_ids": ["0", "1"]}, "decode": {"engine_ids": ["1"]}}},
     "engine_id '1' is used by prefill-1 and decode-0: give each engine its own engine_id"),
    ({"pd": {"decode": {"engines": 0, "kv_ports": []}}},
     "prefill group prefill-0, prefill-1 has no decode group: add a decode group"),
    ({"pd": {"prefill": {"engines": 0, "kv_ports": []}}},
     "decode group decode-0 has no prefill group"),
    ({"pd": {"prefill": {"engines": 0, "kv_ports": []},
             "decode": {"engines": 0, "kv_ports": []}}},
     "the PD router has no workers: give it the prefill and decode groups"),
    ({"pd": {"router_policy": "fastest"}}, "router_policy 'fastest' is not one of"),
    ({"pd": {"prefill": {"kv_ports": [36000]}}},
     "pd.prefill: 2 engine(s) but 1 kv_ports: give each engine its kv_port"),
    ({"pd": {"decode": {"kv_ports": [65530]}}}, "go past 65535: lower kv_port 65530"),
    ({"pd": {"prefill": {"tensor": 16}}},
     "2 rank(s) x 16 NPU(s) = 32 NPUs, but the host has 16"),
    ({"parallel": {"tensor": 8}}, "remove parallel"),
    ({"nodes": 2}, "nodes 2 but pd's engines run on 4 host(s): set nodes to 4"),
    ({"vllm": {"kv-transfer-config": {"kv_connector": "X"}}},
     "vllm flag 'kv-transfer-config' is set through pd"),
    ({"pd": {"decode": {"vllm": {"data-parallel-rank": 3}}}},
     "pd.decode: vllm flag 'data-parallel-rank' is set through pd"),
])
def test_every_pd_refusal_fires_when_the_profile_loads(overrides: dict[str, Any],
                                                       expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        resolve(V31, overrides)
    assert expected in str(info.value)


def test_engines_placed_on_one_host_are_refused_by_their_ports() -> None:
    profile = load_profiles()[V4F]
    assert profile.pd is not None
    # The V4-Flash 950DT deployment's shape: prefill and decode on one server, the same kv_port.
    same = {"prefill": [["10.0.0.1"]], "decode": [["10.0.0.1"]]}
    layout = profile.pd.model_copy(update={
        "decode": profile.pd.decode.model_copy(update={"kv_ports": [36000]})})
    with pytest.raises(RouterPlanError) as info:
        pd_layout.check(layout, 16, same)
    message = str(info.value)
    assert "kv ports [36000, 36016) overlap kv ports [36000, 36016) of prefill engine" in message
    assert "API ports [7100, 7116) overlap API ports [7100, 7104)" in message
    with pytest.raises(RouterPlanError, match="1 engine\\(s\\) but 0 host list"):
        pd_layout.check(profile.pd, 16, {"prefill": [["a"]], "decode": []})
    # Placed on hosts of their own, the same layout passes.
    engines = pd_layout.check(profile.pd, 16, {"prefill": [["p"]], "decode": [["d"]]})
    assert [w.url for w in rank_workers(engines[0])] == [f"http://p:{7100 + i}" for i in range(4)]


def test_each_side_has_its_own_flags_and_environment() -> None:
    profile = load_profiles()[V31]
    prefill, decode = side_profile(profile, "prefill"), side_profile(profile, "decode")
    assert prefill.pd is None and prefill.nodes == 1 and decode.nodes == 2
    assert (prefill.parallel.tensor, prefill.parallel.data, prefill.parallel.data_local) == (
        8, 2, 2)
    assert prefill.vllm["enforce-eager"] is True and "enforce-eager" not in decode.vllm
    assert decode.vllm["compilation-config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert (prefill.env["HCCL_BUFFSIZE"], decode.env["HCCL_BUFFSIZE"]) == ("256", "1100")
    assert "VLLM_ASCEND_ENABLE_FLASHCOMM1" not in decode.env
    # A null in a side's flags removes the profile's flag from that side only.
    changed = resolve(V31, {"pd": {"decode": {"vllm": {"seed": None}}}})
    assert "seed" not in side_profile(changed, "decode").vllm
    assert side_profile(changed, "prefill").vllm["seed"] == 1024


def test_a_hosts_launcher_runs_each_rank_with_vllm_serve_argv() -> None:
    profile = load_profiles()[V31]
    assert profile.pd is not None
    decode = pd_layout.engines(profile.pd, profile.chips_per_node)[2]
    script = host_script(profile, decode, 1, model_path="/models/m", vllm="/env/bin/vllm",
                         dp_address="d0.example", state_dir="/state",
                         env_files=["/etc/ascend-serve/hccl.env"])
    lines = [line for line in script.splitlines() if line.startswith("ASCEND_RT_VISIBLE_DEVICES=")]
    assert len(lines) == 16
    argvs = rank_argvs(profile, decode, decode.nodes[1], model_path="/models/m",
                       vllm="/env/bin/vllm", dp_address="d0.example")
    for index, (line, argv) in enumerate(zip(lines, argvs, strict=True)):
        words = shlex.split(line.removesuffix(" &"))
        assert words[0] == f"ASCEND_RT_VISIBLE_DEVICES={index}" and words[1:] == argv
        assert _flag(argv, "--port") == str(7100 + index)
        assert _flag(argv, "--data-parallel-rank") == str(16 + index)
        assert _flag(argv, "--host") == "0.0.0.0"  # noqa: S104 - the rank's listen address
        assert _flag(argv, "--data-parallel-address") == "d0.example"
    kv = json.loads(_flag(argvs[0], "--kv-transfer-config") or "")
    assert kv == {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_consumer",
                  "kv_port": "36200", "kv_connector_extra_config": {
                      "prefill": {"dp_size": 2, "tp_size": 8},
                      "decode": {"dp_size": 32, "tp_size": 1}}}
    assert "--enforce-eager" not in argvs[0] and "--enable-expert-parallel" in argvs[0]
    assert "export HCCL_BUFFSIZE=1100" in script and ". /etc/ascend-serve/hccl.env" in script
    assert 'wait -n "${pids[@]}"' in script


def test_a_pd_profile_is_not_served_by_the_single_server_launcher() -> None:
    profile = load_profiles()[V32]
    with pytest.raises(ProfileError, match="is a prefill/decode \\(PD\\) profile"):
        launcher.context(profile, model_path="/m", vllm="vllm", state_dir="/s", rank=0,
                         head_address="10.0.0.1")


def test_profiles_list_and_show_describe_pd_profiles() -> None:
    listed = runner.invoke(app, ["profiles", "list"])
    assert listed.exit_code == 0 and "2P1D: P DP2 x TP8" in listed.stdout
    as_json = runner.invoke(app, ["profiles", "list", "--json"])
    pd_json = next(p["pd"] for p in json.loads(as_json.stdout) if p["name"] == V31)
    assert pd_json["connector"] == "MooncakeConnectorV1"
    assert pd_json["decode"]["kv_ports"] == [36200]
    shown = runner.invoke(app, ["profiles", "show", V31])
    assert shown.exit_code == 0, shown.stdout
    data = json.loads(shown.stdout)
    assert data["fit"] is None and set(data["pd_fit"]) == {"prefill", "decode"}
    assert data["pd_fit"]["prefill"]["fit"]["tensor_parallel"] == 8
    assert data["pd_fit"]["decode"]["fit"]["data_parallel"] == 32
    refused = runner.invoke(app, ["profiles", "show", V31, "--set", "pd.decode.kv_ports=[30200]"])
    assert refused.exit_code == 2
    assert "set kv_port to 36000 or more" in " ".join(refused.stderr.split())
