"""What ``ascend-serve doctor`` reports: findings, per-host reports and the checks' context."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ascend_serve.doctor.collected import Collected
from ascend_serve.doctor.known_problems import KNOWN_PROBLEMS, Severity
from ascend_serve.stack.matrix import Matrix

MAX_EVIDENCE = 12
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


class Finding(BaseModel):
    id: str
    severity: Severity
    host: str
    title: str
    detail: str = ""
    evidence: list[str] = Field(default_factory=list)
    remedy: str
    source: str


class HostReport(BaseModel):
    host: str
    collected: bool
    error: str | None = None
    duration_s: float = 0.0
    findings: list[Finding] = Field(default_factory=list)

    @property
    def worst(self) -> str | None:
        if not self.findings:
            return None
        return min((f.severity for f in self.findings), key=SEVERITY_ORDER.__getitem__)


def new_finding(pid: str, host: str, detail: str, evidence: Iterable[str] = (),
                severity: Severity | None = None) -> Finding:
    problem = KNOWN_PROBLEMS[pid]
    lines = [line.rstrip() for line in evidence if line and line.strip()]
    if len(lines) > MAX_EVIDENCE:
        lines = [*lines[: MAX_EVIDENCE - 1], f"... and {len(lines) - MAX_EVIDENCE + 1} more"]
    return Finding(id=pid, severity=severity or problem.severity, host=host, title=problem.title,
                   detail=detail, evidence=lines, remedy=problem.remedy, source=problem.source)

# --- the checks -----------------------------------------------------------------------------------


@dataclass
class Context:
    matrix: Matrix | None
    matrix_error: str | None = None


Check = Callable[[Collected, Context], list[Finding]]


@dataclass
class HostResult:
    report: HostReport
    collected: Collected | None
