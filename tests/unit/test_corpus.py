"""The real-output corpus itself: every sample has its origin in SOURCES and a reading.

``tests/data/corpus/<family>/`` holds verbatim outputs of the vendor's tools and files
(npu-smi, hccn_tool, rank tables, install-tree version files) and vLLM's startup logs that
operators posted or vendors ship, or that the CPU test bed printed; ``<sample>.expected.json`` is
what a careful human reads from it. The readers' tests (``test_corpus_*.py``,
``test_vllm_log.py``) check the readers against those readings; this test checks the corpus.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus import reading, reading_path
from paths import CORPUS

FAMILIES = sorted(p for p in CORPUS.iterdir() if p.is_dir())
META = {"SOURCES", "README.md"}


def _samples(family: Path) -> list[Path]:
    return sorted(p for p in family.iterdir()
                  if p.name not in META and not p.name.endswith(".expected.json"))


def test_corpus_families_and_sizes() -> None:
    assert [f.name for f in FAMILIES] == ["ascend-docker-runtime", "faults", "hccn_tool",
                                          "npu-exporter", "npu-smi", "ranktable", "versions",
                                          "vllm-log"]
    sizes = {f.name: len(_samples(f)) for f in FAMILIES}
    # The floor: at least 20 `npu-smi info` tables.
    tables = [p for p in _samples(CORPUS / "npu-smi")
              if reading(p)["command"] == "npu-smi info"]
    assert len(tables) >= 20, sizes
    # Two small families, each README says what was not found: ascend-docker-runtime (the outputs
    # the vendor's guides show) and npu-exporter (the vendor's two doc excerpts and its collector
    # test's two golden files; no capture from an A2/A3 host exists).
    assert sizes.pop("ascend-docker-runtime") >= 4, sizes
    assert sizes.pop("npu-exporter") >= 4, sizes
    assert all(n >= 10 for n in sizes.values()), sizes


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_sample_has_a_source_and_a_reading(family: Path) -> None:
    listed = {line.split("|", 1)[0].strip()
              for line in (family / "SOURCES").read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#")}
    for sample in _samples(family):
        assert sample.name in listed, f"{sample} has no line in {family / 'SOURCES'}"
        assert reading_path(sample).is_file(), f"{sample} has no {reading_path(sample).name}"
        assert isinstance(reading(sample), dict)
        # A source names where the sample came from: a URL, or a repository and a path.
        line = next(x for x in (family / "SOURCES").read_text(encoding="utf-8").splitlines()
                    if x.split("|", 1)[0].strip() == sample.name)
        assert len(line.split("|")) >= 3 and line.split("|")[1].strip(), line
