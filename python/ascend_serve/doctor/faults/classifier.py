"""The fault classifier: from a line of any log or tool output to a code, its class and an action.

Data, not code, says what is known: the collection's ``data/faults/vendor_codes.json``
(generated from the vendor's
``faultCode.json`` and ``SwitchFaultCode.json`` by :mod:`.vendor_import`) classifies chip and
switch fault codes; ``rules.yml`` holds the action table of every class (worst first) and the
faults the vendor's tables do not classify, marked as this project's own (``source:
ascend-serve``). :func:`classifier` loads both once; :meth:`Classifier.scan` reads any text.

Where a code appears in a text:

- chip codes: ``Error Code : A4025021 8C03A000`` (``npu-smi info -t health``), ``event_id=0x...``
  / ``Event id=0x...`` / ``event_id:  [0x...]`` (device logs; the forms of MindCluster's
  knowledge base, kg-config.json), ``"fault_code":"81078603"`` (the device plugin's fault JSON);
- switch codes: the vendor's bracketed form ``[0x00f1fef5,155913,cpu,na]``;
- CANN error codes: CANN's pattern ``[EWI][A-Z0-9][0-9]{4}`` followed by ``)`` or ``:``
  (kg-config.json entry AISW_CANN_ERRCODE_Custom), looked up in the project's faults; other
  codes (``-8005``) are matched as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ansible_collections.ascend_serve.fleet.plugins.module_utils import fault_codes
from ascend_serve.resources import data_path

PROJECT = "ascend-serve"

CHIP_CONTEXTS = (
    re.compile(r"Error Code\s*:\s*(?P<codes>[0-9A-Fa-f]{8,9}(?:[ \t]+[0-9A-Fa-f]{8,9})*)\b"),
    re.compile(r"event[ _]id\s*[:=]\s*\[?\s*0x(?P<codes>[0-9A-Fa-f]{8,9})\b", re.IGNORECASE),
    re.compile(r"fault_code\\?\"?\s*[:=]\s*\\?\"?(?P<codes>[0-9A-Fa-f]{8,9}(?:,[0-9A-Fa-f]{8,9})*)\b"),
)
SWITCH_CODE = re.compile(r"\[0x[0-9A-Fa-f]{8},[^\]\s,]*,[^\]\s,]*,[^\]\s,]*\]")
CANN_CODE = re.compile(r"(?<![A-Za-z0-9])(?P<code>[EWI][A-Z0-9][0-9]{4})[):]")
MAX_EVIDENCE = 3


class FaultDataError(RuntimeError):
    """The shipped fault data is inconsistent (a packaging bug, never the operator's input)."""


@dataclass(frozen=True)
class FaultClass:
    """A row of the action table."""

    name: str
    rank: int  # 0 = worst
    source: str  # "vendor" or "ascend-serve"
    blocks_service: bool
    action: str
    meaning: str
    does: str
    cites: tuple[str, ...]


@dataclass(frozen=True)
class FaultRule:
    """A fault the vendor's tables do not classify (this project's own)."""

    id: str
    codes: tuple[str, ...]
    component: str
    fault_class: str
    keywords: tuple[re.Pattern[str], ...]
    meaning: str
    fix: str
    cites: tuple[str, ...]
    problem: str | None = None


@dataclass
class Fault:
    """A known fault found in a text: what to tell the operator, with the lines that show it."""

    code: str
    component: str
    meaning: str
    fault_class: str
    action: str
    fix: str
    source: str
    rule: str
    cites: list[str] = field(default_factory=list)
    count: int = 0
    lines: list[int] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "component": self.component, "meaning": self.meaning,
                "class": self.fault_class, "action": self.action, "fix": self.fix,
                "source": self.source, "rule": self.rule, "cites": list(self.cites),
                "count": self.count, "lines": list(self.lines),
                "evidence": list(self.evidence)}


@dataclass
class Scan:
    """What :meth:`Classifier.scan` found: known faults (worst class first) and codes that look
    like vendor codes but that nothing here classifies."""

    faults: list[Fault]
    unknown: dict[str, list[int]]


def _text(name: str) -> str:
    """A file of the collection's ``data/faults/`` (the data's one home)."""
    return data_path("faults", name).read_text(encoding="utf-8")


class Classifier:
    def __init__(self, vendor: Mapping[str, Any], rules: Mapping[str, Any],
                 knowledge_base: Mapping[str, Any] | None = None) -> None:
        self.sources: dict[str, str] = {str(k): " ".join(str(v).split())
                                        for k, v in (rules.get("sources") or {}).items()}
        self.classes: dict[str, FaultClass] = {}
        for rank, row in enumerate(rules.get("classes") or []):
            fc = FaultClass(name=row["name"], rank=rank, source=row["source"],
                            blocks_service=bool(row["blocks_service"]), action=row["action"],
                            meaning=" ".join(row["meaning"].split()),
                            does=" ".join(row["does"].split()), cites=tuple(row["cites"]))
            self.classes[fc.name] = fc
        self.rules: list[FaultRule] = []
        for row in rules.get("faults") or []:
            self.rules.append(FaultRule(
                id=row["id"], codes=tuple(str(c) for c in row.get("codes") or ()),
                component=row["component"], fault_class=row["class"],
                keywords=tuple(re.compile(k, re.IGNORECASE) for k in row.get("keywords") or ()),
                meaning=" ".join(row["meaning"].split()), fix=" ".join(row["fix"].split()),
                cites=tuple(row["cites"]), problem=row.get("problem")))
        self.components: dict[str, str] = dict(rules.get("vendor_components") or {})
        self.vendor = vendor
        self.commit = str(vendor.get("commit", ""))
        self.chip: dict[str, str] = {c.upper(): k for c, k in vendor["chip"]["codes"].items()}
        self.switch: dict[str, str] = {c.lower(): k for c, k in vendor["switch"]["codes"].items()}
        self.by_code: dict[str, FaultRule] = {c.upper(): r for r in self.rules for c in r.codes}
        self.kb = knowledge_base or {}
        self._check()
        literal = sorted({c for c in self.by_code if not CANN_CODE.fullmatch(c + ":")}, key=len,
                         reverse=True)
        self._literal = (re.compile(r"(?<![\w.-])(?P<code>" + "|".join(map(re.escape, literal))
                                    + r")(?!\w)") if literal else None)

    def _check(self) -> None:
        cited = [c for fc in self.classes.values() for c in fc.cites]
        cited += [c for r in self.rules for c in r.cites]
        missing = sorted({c for c in cited if c not in self.sources})
        if missing:
            raise FaultDataError(f"rules.yml cites unknown sources: {missing}")
        used = set(self.chip.values()) | set(self.switch.values())
        used |= {r.fault_class for r in self.rules}
        if used - set(self.classes):
            raise FaultDataError(f"classes without a row in the action table: "
                                 f"{sorted(used - set(self.classes))}")
        if len(self.by_code) != sum(len(r.codes) for r in self.rules):
            raise FaultDataError("a code is claimed by two rules in rules.yml")
        vendor = tuple(n for n, fc in self.classes.items() if fc.source == "vendor")
        if vendor != fault_codes.VENDOR_ORDER:
            raise FaultDataError(f"rules.yml's vendor classes {list(vendor)} are not in the order "
                                 f"of fault_codes.VENDOR_ORDER {list(fault_codes.VENDOR_ORDER)}")
        blocking = {n for n in vendor if self.classes[n].blocks_service}
        if blocking != fault_codes.BLOCKING:
            raise FaultDataError(f"rules.yml blocks_service {sorted(blocking)} differs from "
                                 f"fault_codes.BLOCKING {sorted(fault_codes.BLOCKING)}")
        clash = sorted(set(self.by_code) & set(self.chip))
        if clash:
            raise FaultDataError(f"rules.yml claims vendor-classified codes: {clash}")

    # --- classes -------------------------------------------------------------------------------

    def rank(self, name: str) -> int:
        """0 for the worst class; unknown names rank after every class."""
        fc = self.classes.get(name)
        return fc.rank if fc else len(self.classes)

    def worst(self, names: Iterable[str | None]) -> str | None:
        """The worst of these classes (None when there is none)."""
        known = [n for n in names if n]
        return min(known, key=self.rank) if known else None

    def blocking(self) -> list[str]:
        """The classes that keep a host out of service."""
        return [n for n, fc in self.classes.items() if fc.blocks_service]

    # --- codes ---------------------------------------------------------------------------------

    def vendor_source(self, table: str) -> str:
        path = str(self.vendor[table]["path"])
        return f"vendor: {self.vendor.get('repository')} {path} @ {self.commit}"

    def lookup(self, code: str) -> Fault | None:
        """The fault a code names (chip, switch or CANN/driver code), None when unknown."""
        text = code.strip()
        upper = text.upper().removeprefix("0X") if not text.startswith("[") else text
        if upper in self.chip:
            return self._vendor_fault(upper, self.chip[upper], "chip")
        if text.lower() in self.switch:
            return self._vendor_fault(text, self.switch[text.lower()], "switch")
        rule = self.by_code.get(text.upper())
        return self._rule_fault(rule, text.upper()) if rule else None

    def _vendor_fault(self, code: str, name: str, table: str) -> Fault:
        fc = self.classes[name]
        meaning = f"{self.components.get(table, table)} fault event; {fc.meaning}"
        kb = self._kb_cause(code) if table == "chip" else None
        if kb:
            meaning += f" MindCluster knowledge base: {kb}"
        return Fault(code=code, component=self.components.get(table, table), meaning=meaning,
                     fault_class=name, action=fc.action, fix=fc.does,
                     source=self.vendor_source(table), rule=f"vendor-{table}",
                     cites=[self.sources[c] for c in fc.cites])

    def _rule_fault(self, rule: FaultRule, code: str) -> Fault:
        fc = self.classes[rule.fault_class]
        return Fault(code=code, component=rule.component, meaning=rule.meaning,
                     fault_class=rule.fault_class, action=fc.action, fix=rule.fix,
                     source=PROJECT, rule=rule.id, cites=[self.sources[c] for c in rule.cites])

    def _kb_cause(self, code: str) -> str | None:
        entry = (self.kb.get("knowledge-repository") or {}).get("0x" + code.upper())
        if isinstance(entry, dict):
            cause = (entry.get("attribute") or {}).get("cause_en")
            return str(cause) if cause else None
        return None

    def rule(self, rule_id: str) -> FaultRule | None:
        return next((r for r in self.rules if r.id == rule_id), None)

    def problem_of(self, fault: Fault) -> str | None:
        """The doctor's known problem a fault is reported as (rules.yml ``problem``), if any."""
        rule = self.rule(fault.rule)
        return rule.problem if rule else None

    def class_of_problem(self, problem: str) -> str | None:
        """The worst class of the faults reported as this known problem (None: not a fault)."""
        return self.worst(r.fault_class for r in self.rules if r.problem == problem)

    def severity(self, name: str) -> str:
        """The doctor's severity of a class: error where it keeps the host out of service,
        info where the vendor says not to handle it, warning otherwise."""
        fc = self.classes[name]
        if fc.blocks_service:
            return "error"
        return "info" if fc.action == "record" else "warning"

    # --- text ----------------------------------------------------------------------------------

    def scan_line(self, line: str) -> tuple[list[Fault], list[str]]:
        """The known faults of one line (each once), and the code-like tokens nobody knows."""
        found: dict[str, Fault] = {}
        unknown: list[str] = []
        seen_rules: set[str] = set()

        def add(fault: Fault | None, token: str) -> None:
            if fault is None:
                unknown.append(token)
                return
            seen_rules.add(fault.rule)
            found.setdefault(fault.code, fault)

        for pattern in CHIP_CONTEXTS:
            for match in pattern.finditer(line):
                for token in match.group("codes").replace(",", " ").split():
                    add(self.lookup(token), token.upper())
        for match in SWITCH_CODE.finditer(line):
            add(self.lookup(match.group(0)), match.group(0))
        for match in CANN_CODE.finditer(line):
            code = match.group("code")
            rule = self.by_code.get(code)
            if rule is not None:
                add(self._rule_fault(rule, code), code)
            elif code[0] == "E":  # warnings and infos are not faults
                unknown.append(code)
        if self._literal is not None:
            for match in self._literal.finditer(line):
                code = match.group("code")
                add(self._rule_fault(self.by_code[code.upper()], code), code)
        for rule in self.rules:
            if rule.id not in seen_rules and any(k.search(line) for k in rule.keywords):
                found.setdefault(rule.id, self._rule_fault(rule, ""))  # by its words alone
        return list(found.values()), unknown

    def scan(self, text: str | Sequence[str]) -> Scan:
        """Every known fault in a text: one per code (or per rule where a line has no code),
        with how often and where (1-based line numbers), worst class first."""
        lines = text.splitlines() if isinstance(text, str) else list(text)
        faults: dict[tuple[str, str], Fault] = {}
        unknown: dict[str, list[int]] = {}
        for number, line in enumerate(lines, 1):
            hits, strange = self.scan_line(line)
            for hit in hits:
                key = (hit.rule, hit.code)
                kept = faults.setdefault(key, hit)
                kept.count += 1
                if len(kept.lines) < MAX_EVIDENCE:
                    kept.lines.append(number)
                    kept.evidence.append(line.strip()[:400])
            for token in strange:
                unknown.setdefault(token, []).append(number)
        # A rule's code-less hit is dropped when the same rule was also found with its code.
        coded = {rule for rule, code in faults if code}
        result = [f for (rule, code), f in faults.items() if code or rule not in coded]
        result.sort(key=lambda f: (self.rank(f.fault_class), f.lines[0] if f.lines else 0))
        return Scan(faults=result, unknown=unknown)


def load_knowledge_base(path: Path) -> dict[str, Any]:
    """MindCluster's kg-config.json from a site's install (read at run time, never shipped);
    ValueError/OSError when it cannot be read."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("knowledge-repository"), dict):
        raise ValueError(f"{path} is not MindCluster's kg-config.json (no knowledge-repository)")
    return data


@lru_cache(maxsize=1)
def _shipped() -> tuple[dict[str, Any], dict[str, Any]]:
    vendor = json.loads(_text("vendor_codes.json"))
    rules = yaml.safe_load(_text("rules.yml"))
    return vendor, rules


@lru_cache(maxsize=1)
def classifier() -> Classifier:
    """The classifier over the shipped data."""
    vendor, rules = _shipped()
    return Classifier(vendor, rules)


def with_knowledge_base(kb: Mapping[str, Any]) -> Classifier:
    """The shipped classifier, with MindCluster's knowledge base for the chip codes' causes."""
    vendor, rules = _shipped()
    return Classifier(vendor, rules, kb)
