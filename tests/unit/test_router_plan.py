"""The router's command line and the PD layout checks (ascend_serve.serving.router)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ascend_serve.serving.router import (
    PdEngine,
    PdNode,
    RouterPlanError,
    RouterSettings,
    Worker,
    check_pd,
    handshake_ports,
    kv_transfer_config,
    pd_router_argv,
    pd_router_workers,
    rank_workers,
    router_argv,
    transport_ports,
    vllm_serve_argv,
)

EXTRA_V31 = {"prefill": {"dp_size": 2, "tp_size": 8}, "decode": {"dp_size": 32, "tp_size": 1}}


def v31_2p1d(kv_ports: tuple[int, int, int] = (36000, 36100, 36200),
             npus: int = 16) -> list[PdEngine]:
    """DeepSeek-V3.1's A3 2P1D layout (vllm-ascend v0.23.0, DeepSeek-V3.1.md 5.3): two prefill
    engines of DP2 x TP8 on one host each, one decode engine of DP32 x TP1 on two hosts
    (16 ranks each); the kv_ports raised out of the transport's range for 16 NPUs."""
    return [
        PdEngine("p0", "prefill", kv_ports[0], 2, 8, (PdNode("10.0.0.1", npus, 0, 2, 7100),),
                 EXTRA_V31),
        PdEngine("p1", "prefill", kv_ports[1], 2, 8, (PdNode("10.0.0.2", npus, 0, 2, 7100),),
                 EXTRA_V31),
        PdEngine("d0", "decode", kv_ports[2], 32, 1,
                 (PdNode("10.0.0.3", npus, 0, 16, 7100), PdNode("10.0.0.4", npus, 16, 16, 7100)),
                 EXTRA_V31),
    ]


def refusal(engines: list[PdEngine]) -> str:
    with pytest.raises(RouterPlanError) as info:
        check_pd(engines)
    return str(info.value)


# --- the router's command line ----------------------------------------------------------------


def test_router_argv_lists_each_worker_and_the_worker_key() -> None:
    workers = [Worker("10.0.0.1", 8000), Worker("10.0.0.2", 8000)]
    settings = RouterSettings(host="192.0.2.10", port=8080, policy="power_of_two",
                              prometheus_port=29000, retry_max_retries=3, cb_failure_threshold=2)
    argv = router_argv("/opt/router/bin/vllm-router", workers, settings, api_key="secret")
    assert argv[:4] == ["/opt/router/bin/vllm-router", "--worker-urls",
                        "http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    pairs = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert pairs == {"--host": "192.0.2.10", "--port": "8080", "--policy": "power_of_two",
                     "--prometheus-host": "127.0.0.1", "--prometheus-port": "29000",
                     "--retry-max-retries": "3", "--cb-failure-threshold": "2",
                     "--api-key": "secret"}


def test_router_argv_brackets_ipv6_hosts_and_omits_an_absent_key() -> None:
    argv = router_argv("vllm-router", [Worker("fd00::1", 7100)], RouterSettings())
    assert "http://[fd00::1]:7100" in argv
    assert "--api-key" not in argv


def test_router_without_workers_is_refused() -> None:
    with pytest.raises(RouterPlanError, match="the router has no workers: give it"):
        router_argv("vllm-router", [], RouterSettings())


def test_router_refuses_a_worker_twice_an_unknown_policy_and_a_shared_metrics_port() -> None:
    twice = [Worker("h", 1), Worker("h", 1)]
    with pytest.raises(RouterPlanError, match=r"lists http://h:1 twice"):
        router_argv("vllm-router", twice, RouterSettings())
    with pytest.raises(RouterPlanError, match=r"policy 'least_busy' is not one of cache_aware"):
        router_argv("vllm-router", [Worker("h", 1)], RouterSettings(policy="least_busy"))
    with pytest.raises(RouterPlanError, match="router port 9000 is also its metrics port"):
        router_argv("vllm-router", [Worker("h", 1)],
                    RouterSettings(port=9000, prometheus_port=9000))


def test_pd_router_argv_repeats_prefill_and_decode_per_rank_worker() -> None:
    prefill, decode = pd_router_workers(v31_2p1d())
    argv = pd_router_argv("vllm-router", prefill, decode, RouterSettings(policy="round_robin"))
    assert argv[:2] == ["vllm-router", "--vllm-pd-disaggregation"]
    assert argv.count("--prefill") == 4 and argv.count("--decode") == 32
    assert argv[2:6] == ["--prefill", "http://10.0.0.1:7100", "--prefill", "http://10.0.0.1:7101"]
    assert "--kv-connector" not in argv  # the router's nixl default: vllm-ascend's exchange
    decode_urls = [argv[i + 1] for i, a in enumerate(argv) if a == "--decode"]
    assert decode_urls[15:17] == ["http://10.0.0.3:7115", "http://10.0.0.4:7100"]


@pytest.mark.parametrize(("prefill", "decode", "message"), [
    ([Worker("p", 1)], [], "1 prefill worker(s) and no decode worker: add the decode group"),
    ([], [Worker("d", 1)], "1 decode worker(s) and no prefill worker: add the prefill group"),
    ([], [], "the PD router has no workers"),
])
def test_pd_router_refuses_a_missing_side(prefill: list[Worker], decode: list[Worker],
                                          message: str) -> None:
    with pytest.raises(RouterPlanError) as info:
        pd_router_argv("vllm-router", prefill, decode, RouterSettings())
    assert message in str(info.value)


# --- workers and ports ------------------------------------------------------------------------


def test_workers_are_host_times_rank_ports() -> None:
    engines = v31_2p1d()
    assert [w.url for w in rank_workers(engines[0])] == ["http://10.0.0.1:7100",
                                                         "http://10.0.0.1:7101"]
    decode = rank_workers(engines[2])
    assert len(decode) == 32
    assert {w.host for w in decode} == {"10.0.0.3", "10.0.0.4"}


def test_handshake_ports_follow_the_global_rank_and_the_rank_width() -> None:
    engines = v31_2p1d()
    # Prefill: 2 ranks x TP8 from kv_port; decode's second host starts at global rank 16.
    assert handshake_ports(engines[0], engines[0].nodes[0]) == range(36000, 36016)
    assert handshake_ports(engines[2], engines[2].nodes[1]) == range(36216, 36232)
    assert transport_ports(16) == range(20000, 36000)
    assert transport_ports(8) == range(20000, 28000)


def test_the_v31_layout_with_raised_kv_ports_passes() -> None:
    check_pd(v31_2p1d())


def test_the_tutorials_kv_ports_overlap_the_transport_on_16_npu_hosts() -> None:
    # DeepSeek-V3.1.md's A3 kv_ports (30000, 30100, 30200) lie in [20000, 36000).
    message = refusal(v31_2p1d(kv_ports=(30000, 30100, 30200)))
    assert ("prefill engine p0 on 10.0.0.1: kv ports [30000, 30016) (kv_port 30000) overlap the "
            "Ascend transport's [20000, 36000) for 16 NPUs: set kv_port to 36000 or more"
            in message)
    assert message.count("overlap the Ascend transport") == 4  # p0, p1, both decode hosts
    # The same ports are fine on 8-NPU hosts ([20000, 28000)), with fewer ranks per host.
    eight = [dataclasses.replace(e, nodes=tuple(dataclasses.replace(n, npus=8) for n in e.nodes))
             for e in v31_2p1d(kv_ports=(30000, 30100, 30200))]
    assert "transport" not in refusal(eight)  # refused, but for NPU counts only
    assert "16 rank(s) x 1 NPU(s) = 16 NPUs, but the host has 8" in refusal(eight)


def test_two_engines_on_one_host_with_overlapping_kv_ports_are_refused() -> None:
    # V4-Flash's intra-server 1P1D (DeepSeek-V4-Flash.md 5.2.3): both engines on one 8-NPU
    # host, both kv_port 36010, both engine_id "1".
    extra = {"prefill": {"dp_size": 4, "tp_size": 1}, "decode": {"dp_size": 4, "tp_size": 1}}
    engines = [
        PdEngine("p", "prefill", 36010, 4, 1, (PdNode("h", 8, 0, 4, 8000),), extra,
                 engine_id="1", connector="MooncakeHybridConnector"),
        PdEngine("d", "decode", 36010, 4, 1, (PdNode("h", 8, 0, 4, 8001),), extra,
                 engine_id="1", connector="MooncakeHybridConnector"),
    ]
    message = refusal(engines)
    assert ("engine_id '1' is used by p and d: give each engine its own engine_id" in message)
    assert ("decode engine d on h: kv ports [36010, 36014) overlap kv ports [36010, 36014) of "
            "prefill engine p on h" in message)
    assert ("decode engine d on h: API ports [8001, 8005) overlap API ports [8000, 8004) of "
            "prefill engine p on h" in message)
    fixed = [engines[0], dataclasses.replace(engines[1], kv_port=36110, engine_id="2",
                                             nodes=(PdNode("h", 8, 0, 4, 8100),))]
    check_pd(fixed)


def test_extra_config_must_match_each_sides_layout() -> None:
    engines = v31_2p1d()
    wrong = {"prefill": {"dp_size": 2, "tp_size": 8}, "decode": {"dp_size": 16, "tp_size": 1}}
    engines[2] = dataclasses.replace(engines[2], extra_config=wrong)
    message = refusal(engines)
    assert ('decode engine d0: kv_connector_extra_config decode {"dp_size": 16, "tp_size": 1} '
            'but decode engine d0 runs dp_size 32, tp_size 1: set decode to '
            '{"dp_size": 32, "tp_size": 1}' in message)
    missing = dataclasses.replace(engines[0], extra_config={"prefill": {"dp_size": 2,
                                                                        "tp_size": 8}})
    assert "kv_connector_extra_config has no 'decode' entry" in refusal([missing, engines[2]])


def test_prefill_without_decode_is_refused() -> None:
    message = refusal(v31_2p1d()[:2])
    assert "prefill group p0, p1 has no decode group: add a decode group" in message


def test_rank_layout_problems_are_named() -> None:
    engines = v31_2p1d()
    gap = dataclasses.replace(engines[2], nodes=engines[2].nodes[:1])
    assert "ranks [16, 17" in refusal([engines[0], gap])
    both = dataclasses.replace(engines[2], nodes=(engines[2].nodes[0],
                                                  dataclasses.replace(engines[2].nodes[1],
                                                                      dp_rank_start=0)))
    assert "rank 0 is on both 10.0.0.3 and 10.0.0.4" in refusal([engines[0], both])
    past = dataclasses.replace(engines[0], kv_port=65530)
    assert "go past 65535: lower kv_port 65530" in refusal([past, engines[2]])


def test_kv_transfer_config_and_the_serve_command() -> None:
    engine = dataclasses.replace(v31_2p1d()[2], engine_id="3")
    config = kv_transfer_config(engine)
    assert config == {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_consumer",
                      "kv_port": "36200", "engine_id": "3", "kv_connector_extra_config": EXTRA_V31}
    argv = vllm_serve_argv(engine, engine.nodes[1], 3, model="/models/v31",
                           dp_address="10.0.0.3", dp_rpc_port=12321)
    pairs = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert argv[:3] == ["vllm", "serve", "/models/v31"]
    assert pairs["--port"] == "7103" and pairs["--data-parallel-rank"] == "19"
    assert pairs["--data-parallel-size"] == "32" and pairs["--tensor-parallel-size"] == "1"
    assert json.loads(pairs["--kv-transfer-config"]) == config
    with pytest.raises(RouterPlanError, match=r"local rank 16 is outside \[0, 16\)"):
        vllm_serve_argv(engine, engine.nodes[1], 16, model="m", dp_address="a", dp_rpc_port=1)
