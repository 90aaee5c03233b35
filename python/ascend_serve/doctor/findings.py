"""What ``ascend-serve doctor`` reports: findings, per-host reports and the checks' context."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pydantic import BaseModel, Field, computed_field

from ascend_serve.doctor.collected import Collected
from ascend_serve.doctor.faults import classifier
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
    # The fault classifier's action class (docs/fault-codes.md) and code, where the finding is a
    # classified fault.
    fault_class: str | None = None
    code: str | None = None


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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def worst_fault_class(self) -> str | None:
        """The worst action class among the findings (None: no classified fault)."""
        return classifier().worst(f.fault_class for f in self.findings)


def new_finding(pid: str, host: str, detail: str, evidence: Iterable[str] = (),
                severity: Severity | None = None) -> Finding:
    problem = KNOWN_PROBLEMS[pid]
    return Finding(id=pid, severity=severity or problem.severity, host=host, title=problem.title,
                   detail=detail, evidence=clip_evidence(evidence), remedy=problem.remedy,
                   source=problem.source, fault_class=classifier().class_of_problem(pid))


def clip_evidence(evidence: Iterable[str]) -> list[str]:
    """Evidence lines as a finding keeps them: stripped, blank ones dropped, at most
    MAX_EVIDENCE."""
    lines = [line.rstrip() for line in evidence if line and line.strip()]
    if len(lines) > MAX_EVIDENCE:
        lines = [*lines[: MAX_EVIDENCE - 1], f"... and {len(lines) - MAX_EVIDENCE + 1} more"]
    return lines

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
