"""``ascend-serve doctor``: collect a host's state and map it to known problems with remedies.

Collection (:func:`collect`) runs :mod:`ascend_serve.node.doctor_collect` on the host in one round
trip through a :class:`~ascend_serve.doctor.remote.Transport` and redacts every secret in what comes
back before anything else sees it. The checks (:func:`diagnose`) then read only that collected
data: what the vendor tools printed (``npu-smi``, ``hccn_tool``, ``upgrade-tool``), the vendor's
files (``version.info``, ``ascend_toolkit_install.info``, ``ascend_install.log``), what the roles
wrote (the local facts in ``/etc/ansible/facts.d``, the launcher, the HCCL env file) and what
systemd and the journal say. Each finding names a known problem
(:mod:`ascend_serve.doctor.known_problems`), the host, the evidence lines and the remedy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ascend_serve.doctor.checks_faults import check_faults
from ascend_serve.doctor.checks_host import check_driver_install, check_npus, check_provisioned
from ascend_serve.doctor.checks_network import check_device_network, check_hccl
from ascend_serve.doctor.checks_service import (
    check_collection,
    check_service,
    check_set_env,
    check_swap_tuning,
)
from ascend_serve.doctor.checks_versions import check_versions
from ascend_serve.doctor.collected import Collected, CollectError, collect
from ascend_serve.doctor.findings import (
    SEVERITY_ORDER,
    Check,
    Context,
    Finding,
    HostReport,
    HostResult,
)
from ascend_serve.doctor.redact import redact
from ascend_serve.doctor.remote import Transport, TransportError
from ascend_serve.exitcodes import EXIT_CHECK_FAILED, EXIT_FAILED, EXIT_OK

CHECKS: tuple[Check, ...] = (
    check_provisioned, check_npus, check_driver_install, check_versions, check_set_env,
    check_device_network, check_hccl, check_service, check_swap_tuning, check_faults,
    check_collection,
)


def diagnose(c: Collected, ctx: Context) -> list[Finding]:
    """Every check over the collected data, worst first; one finding per problem id + detail."""
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for check in CHECKS:
        for item in check(c, ctx):
            key = (item.id, item.detail)
            if key not in seen:
                seen.add(key)
                findings.append(item)
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


# --- hosts ------------------------------------------------------------------------------------


def examine(name: str, connect: Callable[[], Transport], command: Sequence[str],
            ctx: Context, timeout: float = 300.0) -> HostResult:
    """Connect, collect and diagnose one host; a failure to collect is the report's error."""
    start = time.monotonic()
    transport: Transport | None = None
    try:
        transport = connect()
        collected = collect(transport, command, timeout)
    except (TransportError, CollectError) as exc:
        return HostResult(HostReport(host=name, collected=False, error=redact(str(exc)),
                                     duration_s=round(time.monotonic() - start, 2)), None)
    finally:
        if transport is not None:
            transport.close()
    collected.host = name
    findings = diagnose(collected, ctx)
    return HostResult(HostReport(host=name, collected=True, findings=findings,
                                 duration_s=round(time.monotonic() - start, 2)), collected)


def examine_all(targets: Sequence[tuple[str, Callable[[], Transport]]],
                command: Sequence[str], ctx: Context, workers: int = 16,
                timeout: float = 300.0) -> list[HostResult]:
    """Every host concurrently; results in the order given."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        return list(pool.map(lambda t: examine(t[0], t[1], command, ctx, timeout), targets))


def exit_code(results: Iterable[HostResult]) -> int:
    """0 nothing at warning level or above, 1 findings, 3 a host could not be collected."""
    results = list(results)
    if any(not r.report.collected for r in results):
        return EXIT_FAILED
    if any(f.severity in ("error", "warning") for r in results for f in r.report.findings):
        return EXIT_CHECK_FAILED
    return EXIT_OK
