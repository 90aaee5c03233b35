"""Chip fault codes and their action classes, node side: one home for what the fleet does with them.

The data is the collection's ``data/faults/vendor_codes.json`` (generated from Ascend/mind-cluster
``component/ascend-device-plugin/build/faultCode.json`` by ``ascend_serve.doctor.faults
.vendor_import``); this module reads it (:func:`load_table`), classifies the codes ``npu-smi info
-t health`` prints (:func:`health_codes`, :func:`classify`), orders classes (:data:`VENDOR_ORDER`,
worst first, the device plugin's ``getMostSeriousFaultType`` in
``component/ascend-device-plugin/pkg/common/fault_code.go``), says which keep a host out of
service (:data:`BLOCKING`) and keeps a fault's lifetime (:func:`lifetime`: present, cleared, since
when) and the policy window after which a cleared fault stops blocking (:func:`blocks`).

The controller's classifier (``ascend_serve.doctor.faults``), the module ``npu_faults``, the filter
``fault_blocks`` and the metrics writer (``npu_metrics.py``) all use it. ``data/faults/rules.yml``
holds the prose of each class; the classifier checks that its vendor classes, their order and
``blocks_service`` agree with the constants here.

Standard library only; runs on managed nodes (Python 3.8+): annotations are not evaluated.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

#: The vendor's classes, worst first (fault_code.go getMostSeriousFaultType).
VENDOR_ORDER = ("SeparateNPU", "PreSeparateNPU", "RestartNPU", "FreeRestartNPU",
                "RestartBusiness", "RestartRequest", "SubHealthFault", "NotHandleFault")
#: The classes that keep a host out of service (rules.yml blocks_service: true). Preflight and the
#: rollout refuse such a host; k8s_node taints it NoSchedule.
BLOCKING = frozenset(("SeparateNPU", "PreSeparateNPU", "RestartNPU", "FreeRestartNPU"))
#: The class whose action is a restart of the serving process (the vLLM unit).
RESTART_BUSINESS = "RestartBusiness"
#: The classes a hot reset (npu-smi set -t reset) may clear, on an idle chip, by policy only.
RESETTABLE = frozenset(("RestartNPU", "FreeRestartNPU"))
#: A code nothing here classifies.
UNKNOWN = "Unknown"

_CODE = re.compile(r"^(?:0[xX])?([0-9A-Fa-f]{8,9})$")
_TIME = "%Y-%m-%dT%H:%M:%SZ"


class FaultCodeError(ValueError):
    """A code table or a record that is not what this module reads."""


def load_table(text: str) -> dict[str, str]:
    """Chip code (upper case) -> class, from the text of ``vendor_codes.json``."""
    try:
        data = json.loads(text)
        codes = data["chip"]["codes"]
    except (ValueError, KeyError, TypeError) as exc:
        raise FaultCodeError(f"not the collection's data/faults/vendor_codes.json: {exc}") from exc
    return {str(code).upper(): str(name) for code, name in codes.items()}


def normalise(code: str) -> str | None:
    """A chip code as the table keys it (``0x80E18402`` -> ``80E18402``); None if not one."""
    match = _CODE.match(code.strip())
    return match.group(1).upper() if match else None


def health_codes(value: str | None) -> list[str]:
    """The codes of an ``Error Code`` value of ``npu-smi info -t health`` (``NA`` -> none;
    several are separated by blanks, as the MindCluster fixture in the corpus shows)."""
    if value is None or value.strip() in ("", "NA"):
        return []
    out = []
    for token in value.replace(",", " ").split():
        code = normalise(token)
        if code is None:
            raise FaultCodeError(f"{token!r} is not a chip fault code")
        if code not in out:
            out.append(code)
    return out


def rank(name: str | None) -> int:
    """0 for the worst class; an unknown code's class ranks after every vendor class."""
    return VENDOR_ORDER.index(name) if name in VENDOR_ORDER else len(VENDOR_ORDER)


def classify(code: str, table: dict[str, str]) -> str:
    """The class of one code (:data:`UNKNOWN` where the vendor's table has none)."""
    return table.get(normalise(code) or "", UNKNOWN)


def worst(names: Any) -> str | None:
    """The worst of these classes, None for none."""
    known = [n for n in names if n]
    return min(known, key=rank) if known else None


def is_blocking(name: str | None) -> bool:
    return name in BLOCKING


def _parse_time(text: str) -> datetime:
    try:
        return datetime.strptime(text, _TIME).replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        raise FaultCodeError(f"{text!r} is not a UTC time as YYYY-MM-DDTHH:MM:SSZ") from None


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime(_TIME)


def blocks(name: str | None, cleared_at: str | None, window_s: int, now: str) -> bool:
    """Whether a fault of class ``name`` keeps its host out of service: a present fault
    (``cleared_at`` empty) of a blocking class does; a cleared one only until ``window_s``
    seconds after it cleared."""
    if not is_blocking(name):
        return False
    if not cleared_at:
        return True
    if window_s < 0:
        raise FaultCodeError(f"the window must be 0 seconds or more, got {window_s}")
    age = (_parse_time(now) - _parse_time(cleared_at)).total_seconds()
    return age < window_s


def key(npu: int, chip: int, code: str) -> str:
    return f"{npu}/{chip}/{code}"


def lifetime(previous: dict[str, Any] | None, chips: list[dict[str, Any]],
             now: str) -> dict[str, dict[str, Any]]:
    """Each fault's lifetime, by ``npu/chip/code``: ``previous`` (the last record's ``faults``)
    updated with what ``chips`` (``[{npu, chip, codes: [{code, class}]}]``) show now.

    A code seen now is ``present`` (``first_seen`` kept from an earlier present record, else
    ``now``); a code recorded present and not seen now is ``cleared`` at ``now``; a cleared code
    keeps its ``cleared_at`` (a re-run changes nothing) until it is seen again (present, a new
    ``first_seen``)."""
    old = dict(previous or {})
    out: dict[str, dict[str, Any]] = {}
    for chip in chips:
        for item in chip.get("codes", []):
            k = key(chip["npu"], chip["chip"], item["code"])
            before = old.get(k) or {}
            first = before.get("first_seen") if before.get("state") == "present" else None
            out[k] = {"npu": int(chip["npu"]), "chip": int(chip["chip"]), "code": item["code"],
                      "class": item["class"], "state": "present", "first_seen": first or now,
                      "cleared_at": ""}
    for k, before in old.items():
        if k in out or not isinstance(before, dict):
            continue
        record = dict(before)
        if record.get("state") == "present":
            record["state"] = "cleared"
            record["cleared_at"] = now
        out[k] = record
    return dict(sorted(out.items()))


def blocking_faults(faults: dict[str, dict[str, Any]], window_s: int,
                    now: str) -> list[dict[str, Any]]:
    """The faults of a lifetime record that keep the host out of service now."""
    return [f for f in faults.values()
            if blocks(f.get("class"), f.get("cleared_at"), window_s, now)]


def restart_plan(faults: dict[str, dict[str, Any]], previous: dict[str, Any] | None,
                 limit: int, window_s: int, now: str) -> dict[str, Any]:
    """Whether a RestartBusiness-class fault restarts the serving unit now, with a rate limit.

    ``previous`` is the last record (``restarts``: UTC times, ``codes``: the faults already
    restarted for, as ``npu/chip/code@first_seen``). A present fault of the class not restarted
    for yet is due; the unit restarts when one is due and fewer than ``limit`` restarts happened
    in the last ``window_s`` seconds. Returns ``restart``, ``due``, ``limited`` (due but over the
    limit) and ``record`` (the next record; equal to ``previous`` when nothing restarts)."""
    before = dict(previous or {})
    handled = list(before.get("codes") or [])
    recent = [t for t in before.get("restarts") or []
              if (_parse_time(now) - _parse_time(t)).total_seconds() < window_s]
    due = ["{}@{}".format(k, f.get("first_seen")) for k, f in sorted(faults.items())
           if f.get("class") == RESTART_BUSINESS and f.get("state") == "present"
           and "{}@{}".format(k, f.get("first_seen")) not in handled]
    restart = bool(due) and len(recent) < limit
    record = {"restarts": list(before.get("restarts") or []), "codes": handled}
    if restart:
        record = {"restarts": [*recent, now], "codes": sorted(set(handled) | set(due))}
    return {"restart": restart, "due": due, "limited": bool(due) and not restart,
            "record": record}
