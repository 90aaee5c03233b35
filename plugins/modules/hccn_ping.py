#!/usr/bin/python
"""Ping peer device NICs from local NPU devices with hccn_tool, and report every result."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hccn_ping
short_description: Test device-NIC reachability between Ascend nodes with hccn_tool
description:
  - Runs C(hccn_tool -i D -ping -g address X pkt COUNT) for every pair, concurrently, and
    returns one result per pair, in the order given.
  - A pair whose C(hccn_tool) gave no answer at all (nothing on stdout or stderr, e.g. the process
    was killed) is asked once more; any answer, a lost ping included, is taken as it is.
  - The module does not fail when pings fail; the caller judges the results (the role aggregates
    them fleet-wide). It fails only on bad options or a missing C(hccn_tool).
  - A result is C(ok) only when C(hccn_tool) exits 0, its summary line
    (C(N packets transmitted, M received, X% packet loss)) is found and at least one reply came
    back. Output without that summary is never taken for success.
version_added: 0.1.0
options:
  pairs:
    description: What to ping from where.
    type: list
    elements: dict
    required: true
    suboptions:
      device:
        description: Local device id that sends.
        type: int
        required: true
      address:
        description: The peer device NIC's IP address.
        type: str
        required: true
      peer_host:
        description: Label only, copied to the result (the peer's inventory name).
        type: str
      peer_device:
        description: Label only, copied to the result (the peer's device id).
        type: int
  count:
    description: Echo requests per pair (C(pkt)).
    type: int
    default: 3
notes:
  - Runs in check mode too, since a ping changes nothing; the ascend-serve role nevertheless
    skips it in check mode, where the device NICs may not be configured yet.
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
  - ascend_serve.fleet.hccn
"""

EXAMPLES = r"""
- name: Ping device 0 of the next node from device 0
  ascend_serve.fleet.hccn_ping:
    pairs:
      - device: 0
        address: 192.168.100.201
        peer_host: node2
        peer_device: 0
    count: 3
  register: hccn_ping
"""

RETURN = r"""
results:
  description: One entry per pair, in the order of O(pairs).
  returned: always
  type: list
  elements: dict
  contains:
    device:
      description: Local device id.
      type: int
    address:
      description: Address pinged.
      type: str
    peer_host:
      description: Label from the pair, or None.
      type: str
    peer_device:
      description: Label from the pair, or None.
      type: int
    ok:
      description: Exit 0, summary parsed and at least one reply received.
      type: bool
    sent:
      description: Requests sent (None when no summary was found).
      type: int
    received:
      description: Replies received (None when no summary was found).
      type: int
    loss:
      description: Packet loss in percent (None when no summary was found).
      type: float
    rtt_ms:
      description: Round trip time of each reply, in milliseconds.
      type: list
      elements: float
    error:
      description: Why the pair is not ok (the tool's stderr, or what could not be parsed); null
        when ok.
      type: str
  sample:
    - {device: 0, address: 192.168.100.201, peer_host: node2, peer_device: 0, ok: true, sent: 3,
       received: 3, loss: 0.0, rtt_ms: [0.081, 0.047, 0.044], error: null}
"""

from typing import TYPE_CHECKING, Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn import (
    COMMON_ARGS,
    HccnError,
    HccnParseError,
    check_address,
    check_device,
    common_options,
    missing_tool_message,
    module_runner,
    parallel,
    parse_ping,
    run_tool,
    tool_usable,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main

if TYPE_CHECKING:
    from ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn import Runner


def check_pairs(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    checked = []
    for index, pair in enumerate(pairs or []):
        where = f"pairs[{index}]"
        peer_device = pair.get("peer_device")
        if peer_device is not None:
            peer_device = check_device(peer_device, f"{where}.peer_device")
        checked.append({
            "device": check_device(pair.get("device"), where),
            "address": check_address(pair.get("address"), f"{where}.address"),
            "peer_host": pair.get("peer_host"),
            "peer_device": peer_device,
        })
    return checked


def judge(rc: int, out: str, err: str) -> dict[str, Any]:
    """ok, sent, received, loss, rtt_ms and error of one ``-ping -g`` answer."""
    result: dict[str, Any] = {"ok": False, "sent": None, "received": None, "loss": None,
                              "rtt_ms": [], "error": None}
    problem = None
    try:
        result.update(parse_ping(out))
    except HccnParseError as exc:
        problem = str(exc)
    if rc == 0 and problem is None and result["received"] > 0:
        result["ok"] = True
        return result
    details = [err.strip()] if err.strip() else []
    if problem is not None and not details:
        details.append(problem if out.strip() else f"hccn_tool gave no answer (rc {rc})")
    if not details:
        details.append(f"no reply ({result['received']} of {result['sent']} received)"
                       if result["received"] == 0 else f"hccn_tool exited with rc {rc}")
    result["error"] = "; ".join(details)
    return result


def run(params: dict[str, Any], runner: Runner) -> dict[str, Any]:
    """The module's work; raises HccnError to fail (bad options, missing tool only)."""
    count = params.get("count")
    count = 3 if count is None else count
    try:
        tool, workers = common_options(params)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be at least 1, got {count!r}")
        pairs = check_pairs(params.get("pairs") or [])
    except ValueError as exc:
        raise HccnError(str(exc)) from None
    if not tool_usable(tool):
        raise HccnError(missing_tool_message(tool))

    def ping(pair: dict[str, Any]) -> dict[str, Any]:
        args = ["-ping", "-g", "address", pair["address"], "pkt", str(count)]
        rc, out, err = run_tool(runner, tool, pair["device"], args)
        if not out.strip() and not err.strip():
            # No answer at all (the tool killed or lost): once more before the pair counts as
            # failed. An answer, even one saying every packet was lost, is never retried.
            rc, out, err = run_tool(runner, tool, pair["device"], args)
        return dict(pair, **judge(rc, out, err))

    return {"changed": False, "results": parallel(ping, pairs, workers)}


def main() -> None:
    result_main(
        {
            "pairs": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "device": {"type": "int", "required": True},
                    "address": {"type": "str", "required": True},
                    "peer_host": {"type": "str"},
                    "peer_device": {"type": "int"},
                },
            },
            "count": {"type": "int", "default": 3},
            **COMMON_ARGS,
        },
        lambda module: run(module.params, module_runner(module)),
        (HccnError,),
    )


if __name__ == "__main__":
    main()
