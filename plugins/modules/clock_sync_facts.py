#!/usr/bin/python
"""Read whether the kernel clock is NTP-synchronised (the state timedatectl reports)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: clock_sync_facts
short_description: Report whether the system clock is synchronised
description:
  - Calls C(adjtimex(2)) in read-only mode. The kernel answers C(TIME_ERROR) while no time
    daemon (chronyd, ntpd, systemd-timesyncd) keeps the clock disciplined; this is the same
    state C(timedatectl) shows as C(NTPSynchronized), and it needs neither systemd nor D-Bus.
  - Multi-node HCCL and TLS need hosts whose clocks agree.
version_added: 0.1.0
options: {}
extends_documentation_fragment:
  - ascend_serve.fleet.facts
"""

EXAMPLES = r"""
- name: Read the clock state
  ascend_serve.fleet.clock_sync_facts:

- name: Stop where no time daemon keeps the clock
  ansible.builtin.assert:
    that: ansible_facts['ascend_clock'].synchronized
    fail_msg: "Clock not synchronised (state {{ ansible_facts['ascend_clock'].state }})."
"""

RETURN = r"""
ansible_facts:
  description: Sets C(ascend_clock), the kernel's clock discipline as C(adjtimex(2)) reports it.
  returned: always
  type: dict
  contains:
    ascend_clock:
      description:
        - C(synchronized) is false while the kernel's C(state) is C(TIME_ERROR) (the name of
          the state C(adjtimex) returns, or its number when it has no name).
        - C(maxerror_us) and C(esterror_us), the kernel's maximum and estimated error of the
          clock in microseconds.
      type: dict
      sample: {"synchronized": true, "state": "TIME_OK", "maxerror_us": 1200, "esterror_us": 35}
"""

import ctypes
import ctypes.util
import struct

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import facts_main

STATES = {0: "TIME_OK", 1: "TIME_INS", 2: "TIME_DEL", 3: "TIME_OOP", 4: "TIME_WAIT",
          5: "TIME_ERROR"}
TIMEX_SIZE = 512  # larger than struct timex on every Linux ABI; modes=0 means read only


def read_clock() -> dict[str, object]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    buf = ctypes.create_string_buffer(TIMEX_SIZE)
    state = libc.adjtimex(buf)
    if state < 0:
        raise OSError(ctypes.get_errno(), "adjtimex failed")
    # struct timex on LP64: int modes (+pad), long offset, freq, maxerror, esterror.
    _offset, _freq, maxerror, esterror = struct.unpack_from("qqqq", buf.raw, 8)
    return {
        "synchronized": state != 5,
        "state": STATES.get(state, str(state)),
        "maxerror_us": maxerror,
        "esterror_us": esterror,
    }


def main() -> None:
    facts_main("ascend_clock", lambda module: read_clock(), {}, "cannot read the clock state",
               (OSError,))


if __name__ == "__main__":
    main()
