"""Every real rank table of ``tests/data/corpus/ranktable`` is valid and read as a careful human
reads it (``<sample>.expected.json``).

Forms covered (see the corpus README and SOURCES): HCCL 1.0 single server (with device_ip, no
device_ip key, device_ip "", device_port) and several servers (A2, 910, A3 "AI Server mode"),
HCCL 1.2 with super_pod_list (A3, super_device_id), and vllm-ascend's prefill/decode table
(version 1.2 without super_pod_list).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import paths
import pytest
from corpus import reading
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.network.ranktable import read, validate

CORPUS = paths.CORPUS / "ranktable"
TABLES = sorted(p for p in CORPUS.glob("*.json") if not p.name.endswith(".expected.json"))
ORIGINALS = sorted(CORPUS.glob("*.orig.jsonc"))
runner = CliRunner()


def _ip(value: Any) -> Any:
    # The readings keep the vendor example's "" and say: treat "" as 'no device ip' (null).
    return None if value == "" else value


def _servers(expected: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"server_id": s["server_id"], "devices": [
        {"device_id": d["device_id"], "device_ip": _ip(d["device_ip"]), "rank_id": d["rank_id"],
         "super_device_id": d["super_device_id"]} for d in s["devices"]]}
        for s in expected["servers"]]


def _pd_devices(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**d, "device_ip": _ip(d["device_ip"])} for d in devices]


def _reading_matches(table: Any, expected: dict[str, Any]) -> None:
    reading = read(table)
    assert reading["version"] == expected["version"]
    assert reading["server_count"] == expected["server_count"]
    assert (reading.get("super_pods") is not None) == expected["super_pod_list"]
    if "prefill_devices" in expected:
        assert reading["kind"] == "pd"
        assert reading["prefill_devices"] == _pd_devices(expected["prefill_devices"])
        assert reading["decode_devices"] == _pd_devices(expected["decode_devices"])
        return
    assert reading["kind"] == "hccl"
    assert reading["servers"] == _servers(expected)
    if "super_pods" in expected:
        assert reading["super_pods"] == expected["super_pods"]


def test_the_corpus_is_there() -> None:
    assert len(TABLES) == 15 and len(ORIGINALS) == 6


@pytest.mark.parametrize("sample", TABLES, ids=[p.name for p in TABLES])
def test_corpus_table_is_valid_and_read_right(sample: Path) -> None:
    table = json.loads(sample.read_text(encoding="utf-8"))
    expected = reading(sample)
    _reading_matches(table, expected)
    problems = validate(table)
    if expected.get("elided"):
        # The author cut devices 1-14 of each 16-die server ('...'): what is left keeps the real
        # rank ids (0, 15, 16, 31), so only the count-based rank rule can object.
        assert problems, "an elided table lists 4 of 32 ranks"
        assert all("rank" in p.message for p in problems), problems
        return
    assert problems == []
    result = runner.invoke(app, ["ranktable", "validate", "--json", str(sample)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["kind"] == ("pd" if "prefill_devices" in expected else "hccl")


@pytest.mark.parametrize("original", ORIGINALS, ids=[p.name for p in ORIGINALS])
def test_commented_originals_read_as_their_json(original: Path) -> None:
    """The doc's commented block is not JSON (the vendor: delete the comments before use); the
    ``.json`` next to it, with only the comment or '...' lines removed, reads the same."""
    cleaned = original.with_name(original.name.replace(".orig.jsonc", ".json"))
    _reading_matches(json.loads(cleaned.read_text(encoding="utf-8")), reading(original))
    result = runner.invoke(app, ["ranktable", "validate", str(original)])
    assert result.exit_code == 2
    assert "is not JSON" in result.stderr
