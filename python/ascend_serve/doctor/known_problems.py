"""The problems ``ascend-serve doctor`` knows, each with its remedy.

Sources: the deployment guide's FAQ (1: driver install fails against the kernel, 2: out of memory
while loading the model, 3: data-sync delay across cards) and the vllm-ascend tracker's most
asked questions (version mismatch and unsourced environment, multi-node hangs and the wrong NIC,
ASCEND_RT_VISIBLE_DEVICES, OOM with W8A8, device busy -8005, unsupported hardware), plus drift of
what the roles configured (swap, host tuning, HCCL env file, the vLLM unit).

Fault codes and the vendor's fault messages are not matched here: the fault classifier
(:mod:`ascend_serve.doctor.faults`) is their one home. A problem below that a classified fault is
reported as is named by that fault's ``problem`` in ``faults/rules.yml``; every other classified
fault is a ``fault-code`` finding with its class and fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

GUIDE_FAQ_1 = "deployment guide FAQ 1 (driver install fails: kernel)"
GUIDE_FAQ_2 = "deployment guide FAQ 2 (out of memory loading the model)"
GUIDE_FAQ_3 = "deployment guide FAQ 3 (data-sync delay across cards)"
TRACKER_VERSIONS = "vllm-ascend tracker: version mismatch / unsourced env"
TRACKER_MULTINODE = "vllm-ascend tracker: multi-node hangs, wrong NIC"
TRACKER_VISIBLE = "vllm-ascend tracker: ASCEND_RT_VISIBLE_DEVICES / Ray"
TRACKER_OOM = "vllm-ascend tracker: OOM loading DeepSeek W8A8"
TRACKER_BUSY = "vllm-ascend tracker: device busy (-8005)"
TRACKER_HARDWARE = "vllm-ascend tracker: is my hardware supported?"
ROLES = "ascend-serve roles: configured state"
FAULTS = "fault classifier: vendor fault tables and this project's faults (docs/fault-codes.md)"

_HEADERS_HOWTO = (
    "install the build tools and the headers of the RUNNING kernel (`uname -r`): Debian/Ubuntu "
    "`apt-get install gcc make dkms linux-headers-$(uname -r)`; openEuler/EulerOS `dnf install "
    "gcc make dkms kernel-headers-$(uname -r) kernel-devel-$(uname -r)`; Kylin `kernel-devel` "
    "(or boot the kernel the driver release supports)"
)
_OOM_HOWTO = (
    "Lower `--max-model-len` and/or `--gpu-memory-utilization` (profile field `vllm`, or "
    "vllm_service_overrides), serve the W8A8 weights (`--quantization ascend`) or spread the "
    "model over more chips (tensor/data parallel), and set "
    "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True against fragmentation; check the fit first "
    "with `ascend-serve serve --dry-run`. Host RAM peaks while loading weights: add a swap file "
    "(swap role, swap_size_gb) as a safety net (vm.swappiness=0 keeps serving off it)."
)
_LINK_HOWTO = (
    "Check the device's optical module, cable and switch port; read `hccn_tool -i N -link -g`, "
    "`-net_health -g` (the netdetect address must answer), `-ip -g`, `-netdetect -g`; re-run "
    "the npu_network role (--tags npu_network). Collectives over a down or unhealthy device NIC "
    "stall every rank: keep RoCE/RDMA between cards healthy, and raise HCCL_CONNECT_TIMEOUT "
    "only after the links are fixed."
)


@dataclass(frozen=True)
class KnownProblem:
    id: str
    severity: Severity
    title: str
    remedy: str
    source: str


_CATALOGUE = (
    # --- deployment guide FAQ 1: the driver against the kernel --------------------------------
    KnownProblem(
        "driver-install-failed", "error", "the last NPU driver install failed",
        "The driver builds its kernel module against the running kernel: " + _HEADERS_HOWTO
        + "; then re-run the driver install (`ansible-playbook site.yml --tags driver`) and hold "
        "the kernel (apt-mark hold / dnf versionlock) so that an upgrade cannot break the module "
        "again. The whole log: /var/log/ascend_seclog/ascend_install.log.",
        GUIDE_FAQ_1),
    KnownProblem(
        "kernel-headers-missing", "warning", "no kernel headers for the running kernel",
        "A driver install or upgrade will fail: " + _HEADERS_HOWTO + ". A kernel upgraded "
        "after the driver install also leaves the module unbuilt: reboot into the kernel the "
        "driver was built for, or rebuild the driver for this one.",
        GUIDE_FAQ_1),
    # --- NPUs -------------------------------------------------------------------------------------
    KnownProblem(
        "npu-unhealthy", "error", "an NPU chip is not healthy",
        "Do not serve on it: read its alarms with `npu-smi info -t health -i N` and its board "
        "page (`-t board -i N`: Compatibility, firmware), check temperature and power; clear the "
        "cause (cooling, firmware, reseat), or leave the chip out of ASCEND_RT_VISIBLE_DEVICES "
        "with a smaller layout until the vendor replaces it. The vendor also refuses driver "
        "upgrades while a chip is not OK.",
        "npu-smi health"),
    KnownProblem(
        "npu-device-busy", "error", "npu-smi cannot open the devices (-8005: device busy)",
        "Another process or container holds the NPUs, or the driver is not initialised: find "
        "the holder with `lsof /dev/davinci*` / `fuser -v /dev/davinci_manager` and the process "
        "table of `npu-smi info`, stop it or give each container its own chips (`--device "
        "/dev/davinciN` plus ASCEND_RT_VISIBLE_DEVICES); after a driver install the host must "
        "be rebooted; check `lsmod | grep drv_davinci` and that the user is in the driver's "
        "group (HwHiAiUser).",
        TRACKER_BUSY),
    KnownProblem(
        "npu-held-by-other", "warning", "NPU chips are used by a process outside the vLLM service",
        "A chip used by another process (a forgotten job, a second container) makes vLLM fail "
        "with device busy or out of memory: stop that process, or serve on other chips "
        "(ASCEND_RT_VISIBLE_DEVICES).",
        TRACKER_BUSY),
    KnownProblem(
        "npu-smi-failed", "error", "npu-smi failed",
        "The NPU driver does not answer: check that it is installed (`/usr/local/Ascend/driver/"
        "version.info`) and loaded (`lsmod | grep drv_davinci`), that the host was rebooted "
        "after the driver install, and re-run the driver role (--tags driver).",
        "npu-smi"),
    KnownProblem(
        "npu-unsupported", "error", "this NPU model is not supported by vllm-ascend",
        "vllm-ascend serves on Atlas A2 (910B) and A3 (910C) only; the 910 (910A), 910 Pro B "
        "and 310P (experimental) are not supported. Serve on A2/A3 servers (see the profiles' "
        "`chip`), or use this host for other work.",
        TRACKER_HARDWARE),
    KnownProblem(
        "reboot-pending", "info", "a reboot is pending after a driver/firmware install",
        "The new driver and firmware take effect after a reboot (the npu_driver role recorded "
        "`reboot_pending`; npu_driver_reboot=never leaves it to the operator): reboot in a "
        "maintenance window.",
        ROLES),
    # --- versions ---------------------------------------------------------------------------------
    KnownProblem(
        "driver-version-mismatch", "error", "the NPU driver is not the version set's HDK",
        "A mixed stack is the top cause of install and runtime failures: install the set's HDK "
        "driver and firmware (`ansible-playbook site.yml --tags driver`, then reboot), or choose "
        "the set that fits the installed driver (`ascend-serve matrix --pin hdk=VERSION`) and "
        "re-run the stack.",
        TRACKER_VERSIONS),
    KnownProblem(
        "firmware-version-mismatch", "warning",
        "the NPU firmware is not the one the role installed",
        "Re-run the driver role (--tags driver) to install the HDK's firmware, then reboot; the "
        "firmware must come from the same HDK release as the driver.",
        TRACKER_VERSIONS),
    KnownProblem(
        "cann-version-mismatch", "error",
        "CANN (toolkit / kernels / NNAL) is not the set's version",
        "Toolkit, kernels/ops and NNAL must all be the set's CANN release, and CANN must match "
        "the driver: re-run the cann role (`ansible-playbook site.yml --tags cann`); do not mix "
        "packages of different releases.",
        TRACKER_VERSIONS),
    KnownProblem(
        "python-env-mismatch", "error", "the serving environment does not hold the locked set",
        "Re-run the python_env role (--tags python_env): it reinstalls the locked set (vllm, "
        "vllm-ascend, torch, torch-npu) under one constraints file. Do not `pip install` or "
        "upgrade single packages in the serving environment: vllm-ascend replaces torch with the "
        "torch-npu-compatible build, and a lone upgrade breaks that pairing.",
        TRACKER_VERSIONS),
    KnownProblem(
        "stack-set-mixed", "error", "the serving environment's set is not the node's NPU stack set",
        "Driver/CANN and the Python environment come from different rows of stack-matrix.yml: "
        "set python_env_set to the node's ascend_stack_set (or leave it at its default) and "
        "re-run python_env.",
        TRACKER_VERSIONS),
    KnownProblem(
        "stack-set-unknown", "warning", "the node's version set is not in this stack-matrix.yml",
        "The node was provisioned with another version matrix than the one doctor reads: pass "
        "it with --matrix, or update the checkout.",
        TRACKER_VERSIONS),
    # --- the Ascend environment of the service ----------------------------------------------------
    KnownProblem(
        "set-env-not-sourced", "error", "the vLLM service does not source the Ascend set_env.sh",
        "Without the CANN toolkit's and ATB's set_env.sh torch-npu cannot infer the device and "
        "libhccl.so / libatb.so are not found (`Failed to infer device type`). The launcher must "
        "`source` both before vllm starts: re-run the vllm_service role (it renders the launcher "
        "from the vllm_service role's vllm-launch.sh.j2 with both scripts for NPU profiles; "
        "do not set "
        "vllm_service_set_env to [] for them), then restart ascend-vllm.",
        TRACKER_VERSIONS),
    KnownProblem(
        "set-env-missing", "error", "the launcher sources a set_env.sh that does not exist",
        "CANN moved or was removed (from CANN 8.5 the toolkit lives in /usr/local/Ascend/"
        "cann-<version>): re-run the cann role, then the vllm_service role so that the launcher "
        "sources the installed scripts (vllm_service_set_env).",
        TRACKER_VERSIONS),
    # --- device network and HCCL (FAQ 3, tracker: multi-node) ------------------------------------
    KnownProblem(
        "hccn-link-down", "error", "an NPU device NIC link is down", _LINK_HOWTO, GUIDE_FAQ_3),
    KnownProblem(
        "hccn-net-health", "error", "an NPU device NIC fails its network health check",
        _LINK_HOWTO, GUIDE_FAQ_3),
    KnownProblem(
        "hccn-tls-mixed", "warning", "TLS differs between the NPU device NICs",
        "HCCL links between devices with different TLS settings do not come up (multi-node "
        "hangs): set the same `npu_network_tls` for the fleet and re-run npu_network; check "
        "with `hccn_tool -i N -tls -g`.",
        TRACKER_MULTINODE),
    KnownProblem(
        "hccn-unreadable", "warning", "hccn_tool could not read a device NIC",
        "Run `hccn_tool -i N -link -g` on the host by hand; the driver may be down (see the "
        "npu-smi findings) or the device id is not on this host (npu_network's plan).",
        GUIDE_FAQ_3),
    KnownProblem(
        "hccl-timeout-invalid", "error", "HCCL_CONNECT_TIMEOUT is outside 120-7200 s",
        "HCCL rejects a connect timeout outside 120-7200 s (default 120), and a short one makes "
        "big multi-node jobs fail in `EI0006 Get_Socket_Timeout`: set hccl_connect_timeout "
        "(e.g. 1800 for large multi-node jobs) and re-run the hccl role (--tags hccl), then "
        "restart ascend-vllm.",
        GUIDE_FAQ_3),
    KnownProblem(
        "hccl-if-ip-absent", "error", "HCCL_IF_IP is not an address of this host",
        "HCCL binds its socket to HCCL_IF_IP: it must be this host's address on the NIC the "
        "nodes reach each other on (the wrong NIC is a top cause of multi-node hangs). Set "
        "hccl_interface / hccl_if_ip for the host and re-run the hccl role.",
        TRACKER_MULTINODE),
    KnownProblem(
        "hccl-ifname-absent", "error", "a socket interface named in the HCCL env does not exist",
        "HCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME must name this host's NIC "
        "(`ip -o link`): set hccl_interface and re-run the hccl role.",
        TRACKER_MULTINODE),
    KnownProblem(
        "hccl-intra-both", "error", "HCCL_INTRA_PCIE_ENABLE and HCCL_INTRA_ROCE_ENABLE are both 1",
        "Both set to 1 is invalid: choose PCIe (1/0, the default) or RoCE (0/1) for intra-node "
        "traffic in the hccl role's variables and re-run it.",
        GUIDE_FAQ_3),
    KnownProblem(
        "hccl-env-missing", "warning", "the HCCL env file the roles wrote is missing",
        "The vLLM launcher loads it for HCCL_IF_IP and the socket NICs: re-run the hccl role "
        "(--tags hccl).",
        ROLES),
    KnownProblem(
        "hccl-timeout-in-log", "error", "HCCL timed out in the vLLM service",
        "Ranks could not connect or sync in time: fix link / net_health of every device on "
        "every node first (hccn_tool), check that HCCL_IF_IP and HCCL_SOCKET_IFNAME name the "
        "NIC the nodes reach each other on, keep TLS the same on all devices, use RDMA (RoCE) "
        "between cards, then raise HCCL_CONNECT_TIMEOUT (and HCCL_EXEC_TIMEOUT) in the hccl "
        "role.",
        GUIDE_FAQ_3),
    # --- ASCEND_RT_VISIBLE_DEVICES, Ray -------------------------------------------------------
    KnownProblem(
        "visible-devices-invalid", "error", "ASCEND_RT_VISIBLE_DEVICES does not fit this host",
        "It must list distinct logical ids of this host's chips (0 .. count-1, `npu-smi info "
        "-m`), at least tensor-parallel x local data-parallel of them: fix the profile's env (or "
        "leave it out: the launcher derives it from the layout), re-run vllm_service.",
        TRACKER_VISIBLE),
    KnownProblem(
        "ray-visible-devices", "warning",
        "Ray backend without RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1",
        "Ray rewrites ASCEND_RT_VISIBLE_DEVICES per worker and then sees no NPUs: export "
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 before `ray start` and in the "
        "service's environment.",
        TRACKER_VISIBLE),
    # --- the vLLM service ---------------------------------------------------------------------
    KnownProblem(
        "service-oom", "error", "the vLLM service ran out of NPU memory loading the model",
        _OOM_HOWTO, GUIDE_FAQ_2 + "; " + TRACKER_OOM),
    KnownProblem(
        "host-oom-kill", "error", "the kernel's OOM killer killed the vLLM service",
        "Host RAM ran out (weights are staged in host memory while loading): add swap (swap "
        "role, swap_size_gb), load fewer ranks per node at once, or use a host with more RAM; "
        + _OOM_HOWTO,
        GUIDE_FAQ_2),
    KnownProblem(
        "service-failed", "error", "the vLLM service is not running",
        "Read `journalctl -u ascend-vllm -n 200` (the other findings name the cause), fix it, "
        "then `systemctl reset-failed ascend-vllm; systemctl restart ascend-vllm` or re-run the "
        "vllm_service role (--tags vllm_service).",
        ROLES),
    KnownProblem(
        "service-unhealthy", "warning", "the vLLM service runs but /health does not answer 200",
        "A big model loads for minutes (VLLM_ENGINE_READY_TIMEOUT_S); if it stays so, read the "
        "journal and run `ascend-serve validate URL`.",
        ROLES),
    KnownProblem(
        "service-missing", "warning", "the vLLM unit the role recorded is not installed",
        "The unit file is gone: re-run the vllm_service role (--tags vllm_service).", ROLES),
    KnownProblem(
        "service-errors", "warning", "error lines in the vLLM service's journal",
        "Read the lines shown and the journal around them (`journalctl -u ascend-vllm`); "
        "`ascend-serve validate URL` checks the endpoints.",
        ROLES),
    # --- swap and host tuning -------------------------------------------------------------------
    KnownProblem(
        "swap-inactive", "warning", "the swap file the swap role switched on is not active",
        "Switch it on (`swapon FILE`) and check its /etc/fstab line, or re-run the swap role "
        "(--tags swap): it is the safety net for host-RAM peaks while loading weights.",
        GUIDE_FAQ_2),
    KnownProblem(
        "swap-not-applied", "info", "the swap file is configured but this host does not allow swap",
        "The swap role created the file but could not switch it on (see its reason); it is "
        "switched on at boot on a host that allows swap.",
        GUIDE_FAQ_2),
    KnownProblem(
        "sysctl-drift", "warning", "a kernel setting differs from what host_tuning applied",
        "Something changed it after the role (a tuned profile, another sysctl.d file): re-run "
        "host_tuning (--tags host_tuning) or `sysctl --system`, and remove the competing "
        "setting.",
        ROLES),
    KnownProblem(
        "sysctl-not-applied", "info", "a kernel setting is persisted but could not be applied",
        "host_tuning wrote it for the next boot only (read-only /proc/sys, as in a container).",
        ROLES),
    KnownProblem(
        "governor-drift", "warning", "the CPU frequency governor is not the one host_tuning set",
        "Re-run host_tuning, and check that the ascend-serve-cpu-governor unit is enabled.",
        ROLES),
    KnownProblem(
        "jemalloc-missing", "warning", "the jemalloc library host_tuning recorded is missing",
        "Re-run host_tuning (--tags host_tuning): LD_PRELOAD of a missing library fails.",
        ROLES),
    # --- classified faults (ascend_serve.doctor.faults) -----------------------------------------
    KnownProblem(
        "fault-code", "error", "a known fault code or fault message",
        "Each such finding carries the fault's action class and its own fix (the classifier's "
        "data: docs/fault-codes.md); `ascend-serve doctor explain FILE` reads a saved log the "
        "same way.",
        FAULTS),
    # --- collection -----------------------------------------------------------------------------
    KnownProblem(
        "not-provisioned", "warning", "no ascend-serve facts and no NPU driver on this host",
        "This host was not provisioned by ascend-serve (run site.yml), or its facts live "
        "elsewhere (--facts-dir).",
        ROLES),
    KnownProblem(
        "collect-partial", "info", "part of the host's state could not be read",
        "Run doctor as root (or with --sudo): the journal, /proc/PID/environ, the launcher and "
        "the install log need it.",
        ROLES),
)

KNOWN_PROBLEMS: dict[str, KnownProblem] = {p.id: p for p in _CATALOGUE}
