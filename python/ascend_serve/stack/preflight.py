"""The preflight report the ``preflight`` role writes on each host, read back for operators."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Check(BaseModel):
    name: str
    ok: bool
    summary: str


class PciNpu(BaseModel):
    address: str
    device: str
    chip_family: str
    numa_node: int = -1


class ReportFacts(BaseModel):
    architecture: str
    distribution: str
    distribution_version: str
    os_family: str
    kernel: str
    memory_mb: int
    npus: list[PciNpu] = Field(default_factory=list)
    expected_npu_count: int
    expected_npu_chip: str
    clock_synchronized: bool


class PreflightReport(BaseModel):
    host: str
    passed: bool
    checks: list[Check]
    facts: ReportFacts

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def load_report(text: str) -> PreflightReport:
    return PreflightReport.model_validate_json(text)
