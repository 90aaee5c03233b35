"""``ascend-serve doctor explain FILE|-``: any log or tool output to the known faults it shows.

The input may be a vLLM log or its journal, a CANN plog, dmesg, ``npu-smi info`` or
``npu-smi info -t health``, ``hccn_tool`` output: the classifier reads every line for the codes
and keywords its data knows. Nothing here knows one format from another.
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ascend_serve.doctor.faults.classifier import Classifier, Fault

MAX_INPUT = 64 * 1024 * 1024  # a bigger "log" is read from its tail
_SNIFF = 8192


class InputError(Exception):
    """The input cannot be read as text (missing, unreadable, a directory, binary)."""


def _decode(data: bytes, name: str) -> str:
    if b"\x00" in data[:_SNIFF]:
        raise InputError(f"{name}: binary data, not a log (a NUL byte in its first "
                         f"{min(len(data), _SNIFF)} bytes)")
    return data.decode("utf-8", errors="replace")


def read_input(source: str, stdin: BinaryIO | None = None) -> str:
    """The text of FILE, or of standard input for ``-``; InputError with one line otherwise."""
    if source == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        try:
            return _decode(stream.read(MAX_INPUT), "standard input")
        except OSError as exc:
            raise InputError(f"standard input: {exc.strerror or exc}") from exc
    if os.path.isdir(source):
        raise InputError(f"{source}: is a directory, not a log file")
    try:
        with open(source, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_INPUT:
                fh.seek(size - MAX_INPUT)
            data = fh.read(MAX_INPUT)
    except OSError as exc:
        reason = {errno.ENOENT: "no such file", errno.EACCES: "permission denied"}.get(
            exc.errno or 0, exc.strerror or str(exc))
        raise InputError(f"{source}: {reason}") from exc
    return _decode(data, source)


@dataclass
class Explained:
    """What a text shows: the known faults (worst class first), the vendor-like codes nothing
    here classifies, and the worst class."""

    lines: int
    faults: list[Fault]
    unknown_codes: dict[str, list[int]] = field(default_factory=dict)
    worst_class: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "worst_class": self.worst_class,
                "faults": [f.as_dict() for f in self.faults],
                "unknown_codes": {code: lines[:10] for code, lines in self.unknown_codes.items()}}


def explain(text: str, clf: Classifier) -> Explained:
    scan = clf.scan(text)
    return Explained(lines=len(text.splitlines()), faults=scan.faults,
                     unknown_codes=scan.unknown,
                     worst_class=clf.worst(f.fault_class for f in scan.faults))
