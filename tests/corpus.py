"""The corpus of real outputs, tests/data/corpus/<family>/ (paths.CORPUS): each sample beside
its reading, what a careful human reads from it (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def reading_path(sample: Path) -> Path:
    """Where the sample's reading is: its name up to the last dot, then .expected.json."""
    return sample.with_name(sample.name.rsplit(".", 1)[0] + ".expected.json")


def reading(sample: Path) -> dict[str, Any]:
    """The sample's reading (a JSON object)."""
    data = json.loads(reading_path(sample).read_text(encoding="utf-8"))
    assert isinstance(data, dict), reading_path(sample)
    return data
