"""Terminal output as the tests read it."""

from __future__ import annotations

import re

# Typer colours its help and usage errors when PY_COLORS / FORCE_COLOR / GITHUB_ACTIONS is set
# (any value, "0" included: scripts/test.sh sets PY_COLORS=0 for Ansible), as it is in CI.
COLOUR_ENV = ("PY_COLORS", "FORCE_COLOR", "GITHUB_ACTIONS")


def uncolored(text: str) -> str:
    """``text`` without ANSI colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
