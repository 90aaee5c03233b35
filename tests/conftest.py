"""Shared fixtures for the Ascend node simulator tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def sim_root(tmp_path: Path) -> Path:
    """A scratch node filesystem (``ASCEND_SIM_ROOT``)."""
    root = tmp_path / "root"
    root.mkdir()
    return root


@pytest.fixture
def node_file(tmp_path: Path) -> Path:
    """Where the node description (``ASCEND_SIM_NODE``) is written."""
    return tmp_path / "node.json"
