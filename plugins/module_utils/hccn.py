"""Shared code of the hccn_* modules: run ``hccn_tool`` and parse what its getters answer.

Every parser reads the layouts of real output in ``tests/data/corpus/hccn_tool`` (checked by
``tests/unit/test_corpus_hccn.py``) and is lenient about case and spacing; it raises
:class:`HccnParseError` for an answer it cannot read: an unreadable answer is never taken for a
good one. An empty ``-ip -g`` answer (the corpus's ``ip-g-dev2-empty-fixture``) and an empty
value mean "not configured" and give None. The "not configured" messages and the ``ip addr``/
``net_mask`` spellings also accepted are not backed by a sample.

The tool is always called with an argument list, through a *runner* (the modules pass
``AnsibleModule.run_command``; tests pass a subprocess call), so nothing here needs a module
object. Code runs on managed nodes: keep it Python 3.8 compatible (annotations are not evaluated).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    #: Runs one argument list; returns (rc, stdout, stderr).
    Runner = Callable[[list[str]], tuple[int, str, str]]

DEFAULT_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
DEFAULT_WORKERS = 8
# The options every hccn module takes (documented by the doc fragment ascend_serve.fleet.hccn).
COMMON_ARGS: dict[str, dict[str, Any]] = {
    "tool": {"type": "path", "default": DEFAULT_TOOL},
    "workers": {"type": "int", "default": DEFAULT_WORKERS},
}


def module_runner(module: Any) -> Runner:
    """hccn_tool through the module's run_command (an argument list, never a shell)."""

    def runner(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(argv)
        return rc, out, err

    return runner

#: Everything :func:`read_state` can read, in the order of the state dict.
STATE_FIELDS = ("address", "netmask", "link", "net_health", "netdetect", "gateway", "tls")

_T = TypeVar("_T")
_R = TypeVar("_R")
_FLAGS = re.IGNORECASE | re.MULTILINE

_NOT_CONFIGURED_RE = re.compile(r"\b(?:not|never)\s+(?:been\s+|be\s+)?(?:configured|set)\b", re.I)
_IP_RE = re.compile(r"^\s*ip[\s_]*addr(?:ess)?\s*[:=][ \t]*(\S*)", _FLAGS)
_NETMASK_RE = re.compile(r"^\s*net[\s_]*mask\s*[:=][ \t]*(\S*)", _FLAGS)
_LINK_RE = re.compile(r"^\s*link[\s_]*(?:status|state)?\s*[:=][ \t]*([A-Za-z]+)\b", _FLAGS)
_HEALTH_RE = re.compile(
    r"^\s*net[\s_]*health[\s_]*(?:status|state)?\s*[:=][ \t]*(\S[^\r\n]*?)\s*$", _FLAGS
)
_NETDETECT_RE = re.compile(
    r"^\s*net[\s_]*detect[\s_]*(?:address|addr|ip)?\s*[:=][ \t]*([^\s,]*)", _FLAGS
)
_GATEWAY_RE = re.compile(
    r"^\s*(?:default[\s_]*)?gateway[\s_]*(?:address|addr|ip)?\s*[:=][ \t]*([^\s,]*)", _FLAGS
)
_TLS_RE = re.compile(
    r"\btls[\s_]*(?:switch|enable|status)\s*(?:\[\s*([01])\s*\]|[:=]\s*([01])\b)", re.I
)
_PING_SUMMARY_RE = re.compile(
    r"(\d+)\s+packets?\s+transmitted\s*,\s*(\d+)\s+(?:packets?\s+)?received\s*,\s*"
    r"(\d+(?:\.\d+)?)\s*%\s*(?:packet\s+)?loss",
    re.I,
)
_PING_REPLY_RE = re.compile(
    r"^\s*recv\s+seq\s*=\s*\d+\s*[,\s]\s*time\s*=\s*(\d+(?:\.\d+)?)\s*ms", _FLAGS
)
# A lost request (ping-g-partial-loss-33pct-mindie-doc: "recv time out seq=O", an OCR'd 0).
_PING_TIMEOUT_RE = re.compile(r"^\s*recv\s+time\s*out\s+seq\s*=", _FLAGS)


class HccnParseError(ValueError):
    """An hccn_tool answer that does not say what was asked."""


class HccnError(Exception):
    """A module failure: ``msg`` for the user, ``result`` the keys to return with it."""

    def __init__(self, msg: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result: dict[str, Any] = dict(result or {})


# --- running the tool ---------------------------------------------------------------------------


def tool_usable(tool: str) -> bool:
    return os.path.isfile(tool) and os.access(tool, os.X_OK)


def missing_tool_message(tool: str) -> str:
    return (f"hccn_tool not found (or not executable) at {tool}: install the NPU driver first, "
            "it provides hccn_tool (or set the tool option)")


def command(tool: str, device: int, args: Iterable[str]) -> list[str]:
    return [tool, "-i", str(device), *args]


def command_text(argv: list[str]) -> str:
    return " ".join(shlex.quote(arg) for arg in argv)


def run_tool(runner: Runner, tool: str, device: int, args: Iterable[str]) -> tuple[int, str, str]:
    """One ``hccn_tool -i DEVICE ARGS...`` call, as (rc, stdout, stderr); never a shell."""
    argv = command(tool, device, args)
    try:
        rc, out, err = runner(argv)
    except OSError as exc:
        return 127, "", f"cannot run {argv[0]}: {exc}"
    return rc, out or "", err or ""


def parallel(func: Callable[[_T], _R], items: list[_T], workers: int) -> list[_R]:
    """``func`` over ``items`` on up to ``workers`` threads; results in the order of ``items``."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(int(workers), len(items)))) as pool:
        return list(pool.map(func, items))


# --- option checks ------------------------------------------------------------------------------


def common_options(params: dict[str, Any]) -> tuple[str, Any]:
    """The ``tool`` and ``workers`` of a module's parameters (COMMON_ARGS), defaults for unset
    ones; ValueError when workers is below 1."""
    tool = params.get("tool") or DEFAULT_TOOL
    workers = params.get("workers") or DEFAULT_WORKERS
    if int(workers) < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return tool, workers


def check_address(value: Any, what: str) -> str:
    """The normalised text of an IPv4/IPv6 address; ValueError naming ``what`` otherwise."""
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not an IP address") from None


def check_netmask(value: Any, what: str) -> str:
    """The normalised text of a dotted IPv4 netmask; ValueError naming ``what`` otherwise."""
    text = str(value).strip()
    try:
        if "." not in text:
            raise ValueError(text)
        ipaddress.IPv4Network(f"0.0.0.0/{text}")
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not a dotted IPv4 netmask") from None


def check_device(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: device must be a non-negative integer, got {value!r}")
    return value


# --- parsers ------------------------------------------------------------------------------------


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:120] + ("..." if len(flat) > 120 else ""))


def _optional_address(match: re.Match[str] | None, text: str, what: str) -> str | None:
    if match is None:
        if _NOT_CONFIGURED_RE.search(text):
            return None
        raise HccnParseError(f"no {what} in answer {_excerpt(text)}")
    value = match.group(1).strip()
    if not value:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise HccnParseError(f"{what} {value!r} is not an IP address") from None


def parse_ip(text: str) -> tuple[str | None, str | None]:
    """``-ip -g``: (address, netmask); (None, None) when the device says it has none.

    A device without an address answers nothing at all (``ip-g-dev2-empty-fixture``).
    """
    if not text.strip():
        return None, None
    address = _optional_address(_IP_RE.search(text), text, "ip address")
    if address is None:
        return None, None
    mask = _NETMASK_RE.search(text)
    if mask is None or not mask.group(1):
        raise HccnParseError(f"no netmask in answer {_excerpt(text)}")
    try:
        netmask = check_netmask(mask.group(1), "netmask")
    except ValueError as exc:
        raise HccnParseError(str(exc)) from None
    return address, netmask


def parse_link(text: str) -> str:
    """``-link -g``: the link state, uppercased (``UP``, ``DOWN``, ...)."""
    match = _LINK_RE.search(text)
    if match is None:
        raise HccnParseError(f"no link status in answer {_excerpt(text)}")
    return match.group(1).upper()


def parse_net_health(text: str) -> str:
    """``-net_health -g``: the status, lowercased (``success``, ``fault``, ``init``, ...)."""
    match = _HEALTH_RE.search(text)
    if match is None:
        raise HccnParseError(f"no net health status in answer {_excerpt(text)}")
    return " ".join(match.group(1).split()).lower()


def parse_netdetect(text: str) -> str | None:
    """``-netdetect -g``: the detection address, None when none is set."""
    return _optional_address(_NETDETECT_RE.search(text), text, "netdetect address")


def parse_gateway(text: str) -> str | None:
    """``-gateway -g``: the default gateway, None when none is set."""
    return _optional_address(_GATEWAY_RE.search(text), text, "gateway")


def parse_tls(text: str) -> bool:
    """``-tls -g``: whether TLS is enabled (``tls switch[1]``)."""
    match = _TLS_RE.search(text)
    if match is None:
        raise HccnParseError(f"no tls switch in answer {_excerpt(text)}")
    return (match.group(1) or match.group(2)) == "1"


def parse_ping(text: str) -> dict[str, Any]:
    """``-ping -g``: sent, received, loss (percent) from the last summary line, and reply times."""
    summaries = _PING_SUMMARY_RE.findall(text)
    if not summaries:
        raise HccnParseError(f"no ping summary in answer {_excerpt(text)}")
    sent, received, loss = summaries[-1]
    return {
        "sent": int(sent),
        "received": int(received),
        "loss": float(loss),
        "rtt_ms": [float(ms) for ms in _PING_REPLY_RE.findall(text)],
    }


def ping_timeouts(text: str) -> int:
    """``-ping -g``: how many requests the answer reports lost (``recv time out seq=N``)."""
    return len(_PING_TIMEOUT_RE.findall(text))


# --- reading a device ---------------------------------------------------------------------------

#: getter name -> (hccn_tool arguments, state fields it fills, parser returning them as a tuple)
GETTERS: dict[str, tuple[list[str], tuple[str, ...], Callable[[str], tuple[Any, ...]]]] = {
    "ip": (["-ip", "-g"], ("address", "netmask"), parse_ip),
    "link": (["-link", "-g"], ("link",), lambda text: (parse_link(text),)),
    "net_health": (["-net_health", "-g"], ("net_health",), lambda text: (parse_net_health(text),)),
    "netdetect": (["-netdetect", "-g"], ("netdetect",), lambda text: (parse_netdetect(text),)),
    "gateway": (["-gateway", "-g"], ("gateway",), lambda text: (parse_gateway(text),)),
    "tls": (["-tls", "-g"], ("tls",), lambda text: (parse_tls(text),)),
}


def read_getter(
    runner: Runner, tool: str, device: int, getter: str
) -> tuple[dict[str, Any], str | None]:
    """One getter: ({field: value}, None), or ({field: None}, why it could not be read)."""
    args, fields, parse = GETTERS[getter]
    rc, out, err = run_tool(runner, tool, device, args)
    unknown = dict.fromkeys(fields)
    if rc != 0:
        why = (err.strip() or out.strip() or "no output").splitlines()[-1]
        return unknown, f"device {device}: {getter}: {command_text(args)} failed (rc {rc}): {why}"
    try:
        values = parse(out)
    except HccnParseError as exc:
        return unknown, f"device {device}: {getter}: unreadable answer: {exc}"
    return {field: values[i] for i, field in enumerate(fields)}, None


def read_states(
    runner: Runner,
    tool: str,
    devices: list[int],
    workers: int = DEFAULT_WORKERS,
    getters: Iterable[str] = tuple(GETTERS),
) -> list[tuple[dict[str, Any], list[str]]]:
    """Read ``devices`` (every getter of every device concurrently), in the order given.

    Each item is (state, errors): state has ``device`` and the fields of ``getters`` (None where
    not configured or unreadable); errors says why a field could not be read.
    """
    names = list(getters)
    calls = [(device, name) for device in devices for name in names]
    answers = parallel(lambda call: read_getter(runner, tool, call[0], call[1]), calls, workers)
    states: dict[int, tuple[dict[str, Any], list[str]]] = {}
    for i, (values, error) in enumerate(answers):
        device = calls[i][0]
        state, errors = states.setdefault(device, ({"device": device}, []))
        state.update(values)
        if error:
            errors.append(error)
    result = []
    for device in devices:
        state, errors = states.get(device, ({"device": device}, []))
        ordered = {"device": device}
        ordered.update((key, state[key]) for key in STATE_FIELDS if key in state)
        result.append((ordered, errors))
    return result


def read_state(
    runner: Runner, tool: str, device: int, workers: int = DEFAULT_WORKERS
) -> tuple[dict[str, Any], list[str]]:
    """A device's full state ``{device, address, netmask, link, net_health, netdetect, gateway,
    tls}`` (None where not configured or unknown) and the reasons for any unknown field."""
    return read_states(runner, tool, [device], workers)[0]
