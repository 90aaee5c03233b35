"""The preflight role's CPU serving checks (tasks/cpu_features.yml), in check mode on this
machine: the CPU features and NUMA nodes a CPU profile needs, read from a cpuinfo file and a NUMA
node directory standing in for a Kunpeng host's /proc/cpuinfo and /sys/devices/system/node.

The stand-in cpuinfo is built, not recorded: its "Features" lines use the Linux arm64 hwcap names
(torvalds/linux arch/arm64/kernel/cpuinfo.c, hwcap_str: "fp", "asimd", "fphp", "asimdhp", ...)
and no Kunpeng recording is in the corpus."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from ansible_run import play_role, this_machine_preflight_vars

# Armv8.2-A with FP16 arithmetic, no BF16 and no SVE: what GCC's tsv110 (Kunpeng 920) entry
# lists (gcc/config/aarch64/aarch64-cores.def: V8_2A, CRYPTO, F16, AES, SHA2).
FP16_CPU = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm dcpop"
# An Armv8.0-A CPU: no FP16 arithmetic.
V80_CPU = "fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid"
FLOAT16 = ["fp", "asimd", "fphp", "asimdhp"]


def _host(tmp_path: Path, cpus: list[str], numa_nodes: int) -> dict[str, str]:
    info = tmp_path / "cpuinfo"
    info.write_text("".join(
        f"processor\t: {i}\nBogoMIPS\t: 200.00\nFeatures\t: {features}\n"
        f"CPU implementer\t: 0x48\nCPU architecture: 8\nCPU part\t: 0xd01\n\n"
        for i, features in enumerate(cpus)))
    nodes = tmp_path / "node"
    for index in range(numa_nodes):
        (nodes / f"node{index}").mkdir(parents=True)
    (nodes / "possible").parent.mkdir(parents=True, exist_ok=True)
    (nodes / "possible").write_text(f"0-{max(numa_nodes - 1, 0)}\n")
    return {"preflight_cpu_info_path": str(info), "preflight_numa_node_dir": str(nodes)}


def _preflight(tmp_path: Path, extra: dict[str, Any]) -> str:
    variables: dict[str, Any] = {
        # This machine as the other host checks see it: x86_64, no NPUs, little memory.
        **this_machine_preflight_vars(tmp_path),
        "preflight_npu_smi": str(tmp_path / "no-npu-smi"),
        **extra,
    }
    proc = play_role(tmp_path, "preflight", variables, "--check", "-e",
                     f"ansible_python_interpreter={sys.executable}", name="cpu preflight")
    return proc.stdout + proc.stderr + f"\nrc={proc.returncode}"


def test_a_kunpeng_like_host_passes(tmp_path: Path) -> None:
    out = _preflight(tmp_path, {**_host(tmp_path, [FP16_CPU] * 4, 4),
                                "preflight_cpu_features": FLOAT16,
                                "preflight_cpu_min_numa_nodes": 4})
    assert out.endswith("rc=0"), out[-3000:]
    # Read-only: each of the file's tasks reports ok, never changed.
    for task in ("Read the CPU description", "List the NUMA nodes", "Add the CPU checks"):
        assert re.search(rf"preflight : {task}\] \**\nok: \[localhost\]", out), task


def test_missing_features_and_numa_nodes_are_refused_with_every_problem(tmp_path: Path) -> None:
    # One CPU of four lacks FP16 arithmetic; two NUMA nodes where the profile binds to four.
    out = _preflight(tmp_path, {**_host(tmp_path, [FP16_CPU] * 3 + [V80_CPU], 2),
                                "preflight_cpu_features": FLOAT16,
                                "preflight_cpu_min_numa_nodes": 4})
    assert out.endswith("rc=2"), out[-3000:]
    text = " ".join(out.split())
    assert "Preflight failed on localhost with 2 problem(s); nothing was changed" in text
    assert "the CPU lacks fphp, asimdhp (" in text
    assert "2 NUMA node(s) in " in text and "binds its ranks to at least 4" in text


def test_nothing_is_read_when_no_cpu_profile_asks(tmp_path: Path) -> None:
    out = _preflight(tmp_path, {})
    assert out.endswith("rc=0"), out[-3000:]
    assert re.search(r"preflight : Read the CPU description\] \**\nskipping: \[localhost\]", out)
