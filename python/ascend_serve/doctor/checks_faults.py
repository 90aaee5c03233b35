"""``ascend-serve doctor`` check of classified faults in what the collector brought back.

The fault classifier (:mod:`ascend_serve.doctor.faults`) reads each chip's ``npu-smi info -t
health`` (its error codes), the ``[ERROR]`` lines of the newest CANN plog files, ``hccn_tool``'s
answers and the vLLM unit's journal (its latest start). A fault whose rule names a known problem
(``problem`` in ``faults/rules.yml``) is reported, for the journal and ``hccn_tool``, by the
check that owns that output (:func:`~ascend_serve.doctor.checks_service.check_service`,
:func:`~ascend_serve.doctor.checks_network.check_device_network`; ``npu-smi info`` failing with
-8005 by :func:`~ascend_serve.doctor.checks_host.check_npus`), with its class. Every other known
fault, and every fault of the plog and of ``-t health``, is a ``fault-code`` finding here, with
its code, class and fix.
"""

from __future__ import annotations

from collections.abc import Iterator

from ascend_serve.doctor.collected import Collected
from ascend_serve.doctor.faults import Fault, classifier
from ascend_serve.doctor.findings import Context, Finding, clip_evidence
from ascend_serve.doctor.journal import latest_run
from ascend_serve.doctor.known_problems import KNOWN_PROBLEMS


def collected_texts(c: Collected) -> Iterator[tuple[str, str, bool]]:
    """(where, text, owned) of every collected output the classifier reads; ``owned``: another
    check reports this output's faults that are known problems."""
    for name in sorted(c.sections):
        if name.startswith("npu-smi.health:"):
            result = c.cmd(name)
            if result is not None:
                _, npu, chip = name.split(":")
                yield (f"npu-smi info -t health -i {npu} -c {chip}",
                       result[1] + "\n" + result[2], False)
        elif name.startswith("plog:"):
            text = c.text(name)
            if text:
                yield f"plog {name.removeprefix('plog:')}", text, False
        elif name.startswith("hccn:"):
            result = c.cmd(name)
            if result is not None:
                _, dev, getter = name.split(":")
                yield f"hccn_tool -i {dev} -{getter} -g", result[1] + "\n" + result[2], True
    journal = c.cmd("journal")
    if journal and journal[0] == 0:
        unit = c.value("unit.name") or "ascend-vllm"
        yield f"journalctl -u {unit} (latest start)", "\n".join(latest_run(journal[1])), True


def check_faults(c: Collected, ctx: Context) -> list[Finding]:
    clf = classifier()
    found: dict[tuple[str, str], tuple[Fault, list[str]]] = {}
    for where, text, owned in collected_texts(c):
        for fault in clf.scan(text).faults:
            if owned and clf.problem_of(fault) is not None:
                continue  # reported as its known problem by the check that owns the output
            key = (fault.rule, fault.code)
            kept = found.setdefault(key, (fault, []))
            kept[1].extend(f"{where}: {line}" for line in fault.evidence)
    problem = KNOWN_PROBLEMS["fault-code"]
    findings = []
    for fault, evidence in found.values():
        name = fault.code or fault.rule
        findings.append(Finding(
            id=problem.id, severity=clf.severity(fault.fault_class), host=c.host,  # type: ignore[arg-type]
            title=f"{name}: {fault.component} fault, class {fault.fault_class}",
            detail=fault.meaning, evidence=clip_evidence(evidence), remedy=fault.fix,
            source=fault.source, fault_class=fault.fault_class, code=fault.code or None))
    return sorted(findings, key=lambda f: clf.rank(f.fault_class or ""))
