"""Command line of the simulator (test infrastructure, not part of the product).

  python -m ascend_sim node create DIR --model atlas800-a2 [--npus N] [--health NPU=STATE]
  python -m ascend_sim node up NAME --model atlas800-a2 [--image IMG] [--npus N]
  python -m ascend_sim node down NAME
  python -m ascend_sim fault DIR installer_crash driver [--times N]
  python -m ascend_sim health DIR NPU STATE
  python -m ascend_sim fault-code DIR NPU [CODE ...] [--chip C]   (no CODE: clear)
  python -m ascend_sim unit-log DIR hccl-timeout|clear [--pid N]  (EI0006 in the unit's log)
  python -m ascend_sim link DIR DEVICE DOWN|UP     (a device NIC link fault; UP clears it)
  python -m ascend_sim packages OUT (--set NAME | --driver V --firmware V) [--cann V] [--chip 910b]
                                [--arch A]   (--set: driver, firmware and CANN from the matrix)
  python -m ascend_sim miniconda OUT [--arch A] [--vars-file F]   (the Miniconda test double)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from . import proxyssh
from .miniconda import build_installer
from .models import SERVER_MODELS, Node, make_node
from .runfile import Package, build, sha256_of
from .sysfs import write_infiniband_tree, write_pci_tree

STATE_DIR = Path(os.environ.get("ASCEND_SIM_STATE", "/var/lib/ascend-sim"))
DEFAULT_IMAGE = os.environ.get("ASCEND_SIM_IMAGE", "localhost/ascend-serve-node:bookworm")
HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")


def create_node(directory: Path, model: str, npus: int | None, health: list[str]) -> Node:
    node = make_node(model, npus)
    for item in health:
        npu_text, _, state = item.partition("=")
        set_health(node, int(npu_text), state)
    directory.mkdir(parents=True, exist_ok=True)
    node.save(directory / "node.json")
    write_pci_tree(node, directory / "sysfs")
    write_infiniband_tree(node, directory / "infiniband")  # what /sys/class/infiniband shows
    return node


def set_health(node: Node, npu: int, state: str) -> None:
    if state not in HEALTH_STATES:
        raise SystemExit(f"health must be one of {', '.join(HEALTH_STATES)}")
    chips = [c for c in node.chips if c.npu == npu]
    if not chips:
        raise SystemExit(f"node has no NPU {npu}")
    for chip in chips:
        chip.health = state


# The chip codes a real `npu-smi info -t health` or device-plugin sample of the corpus shows
# (tests/data/corpus/faults/: the MindCluster health fixture and the device plugin's fault
# ConfigMap); a code no real sample shows is not simulated (issue #32).
CORPUS_CHIP_CODES = ("A4025021", "8C03A000", "8C084E00", "A8028801", "A4028801", "80E18402",
                     "80E18401", "81078603")
# One RestartBusiness-class code (the vendor's faultCode.json; the class no sample of the corpus
# shows), printed in the corpus's `-t health` format (the MindCluster health fixture): 80E01801,
# the uncorrectable-ECC ("uce") code MindCluster's own test data uses
# (Ascend/mind-cluster component/clusterd/testdata/resource/job_fault_rank_test.yaml
# @ 22bb3d987bc0208c3eb7395e222b661276133c58).
VENDOR_TABLE_CHIP_CODES = ("80E01801",)
# The Error Information of the corpus's one health page with codes (the same fixture).
CORPUS_ERROR_INFORMATION = "ascend_monitor adda heart beat lost error"


def set_fault_codes(node: Node, npu: int, chip: int, codes: list[str]) -> None:
    """Put one chip in Alarm with these codes (none: back to OK with no code)."""
    chips = [c for c in node.chips if c.npu == npu]
    if not 0 <= chip < len(chips):
        raise SystemExit(f"node has no chip {chip} on NPU {npu}")
    wanted = [c.upper() for c in codes]
    known = CORPUS_CHIP_CODES + VENDOR_TABLE_CHIP_CODES
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise SystemExit(f"no real sample shows {', '.join(unknown)}: the simulator prints only "
                         f"{', '.join(known)}")
    target = chips[chip]
    target.error_codes = wanted
    target.error_information = CORPUS_ERROR_INFORMATION if wanted else ""
    target.health = "Alarm" if wanted else "OK"


def hccl_timeout_lines(pid: int, at: datetime) -> list[str]:
    """An HCCL socket timeout as CANN writes it to the serving process's output, in the format of
    the corpus's real sample (tests/data/corpus/faults/hccl-ei0006-get-socket-timeout-2node-
    issue5461.log, vllm-ascend issue 5461): ``[PID: N] YYYY-MM-DD-HH:MM:SS.mmm.uuu
    Get_Socket_Timeout(EI0006): ...``, then the indented ``TraceBack`` header. Only the message's
    first sentence is printed; the sample's Reason and Solution prose is not repeated."""
    milli, micro = divmod(at.microsecond, 1000)
    stamp = at.strftime("%Y-%m-%d-%H:%M:%S") + f".{milli:03d}.{micro:03d}"
    return [f"[PID: {pid}] {stamp} Get_Socket_Timeout(EI0006): Getting socket times out.",
            "        TraceBack (most recent call last):"]


def set_unit_log_fault(node: Node, fault: str, pid: int) -> None:
    """Lines the serving unit prints as it fails (the ``unit_log`` knob, read by the stand-in
    server tests/data/vllm-standin); ``clear`` removes them."""
    if fault == "clear":
        node.faults.pop("unit_log", None)
    else:
        node.faults["unit_log"] = hccl_timeout_lines(pid, datetime.now(timezone.utc))


def set_link(node: Node, device: int, state: str) -> None:
    """The link fault knob hccn_tool applies to the device's NIC on its next run."""
    if device not in [c.phy_id for c in node.chips]:
        raise SystemExit(f"node has no device {device}")
    net = node.device_net.setdefault(str(device), {})
    if state == "DOWN":
        net["link"] = "DOWN"
    else:
        net.pop("link", None)
        if not net:
            del node.device_net[str(device)]


def podman_volumes(
    directory: Path,
    mirror: Path | None = None,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    ssh: bool = False,
) -> list[str]:
    """The mounts that make a container a simulated node (molecule.yml lists the same)."""
    volumes = [f"{directory}/sysfs:/sys/bus/pci/devices:ro", f"{directory}:/opt/ascend-sim:rw"]
    if mirror is not None:  # the site's package mirror (kernel headers of the running kernel)
        volumes.append(f"{mirror}:/srv/ascend-mirror:ro")
    if wheelhouse is not None:  # the site's wheelhouse (pip --find-links)
        volumes.append(f"{wheelhouse}:/srv/wheelhouse:ro")
    if ca_bundle is not None:  # the CA bundle the site's pip trusts
        volumes.append(f"{ca_bundle}:/srv/ca/site-ca.crt:ro")
    if ssh:  # the test bed's key logs in over SSH (proxyssh)
        volumes.append(proxyssh.volume())
    return volumes


def node_up(
    name: str,
    model: str,
    npus: int | None,
    image: str,
    mirror: Path | None = None,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    ssh: bool = False,
) -> Path:
    directory = STATE_DIR / name
    subprocess.run(["podman", "rm", "-f", "--ignore", name], check=True, capture_output=True)
    create_node(directory, model, npus, [])
    # NET_ADMIN: hccn_tool gives each device NIC a real interface in the node's namespace.
    cmd = ["podman", "run", "-d", "--name", name, "--hostname", name, "--cap-add", "NET_ADMIN"]
    for volume in podman_volumes(directory, mirror, wheelhouse, ca_bundle, ssh):
        cmd += ["-v", volume]
    cmd += ["--systemd=always", image, "/sbin/init"]
    subprocess.run(cmd, check=True, capture_output=True)
    return directory


def pins_by_role(sums: dict[str, str]) -> dict[str, dict[str, str]]:
    """Group pinned checksums the way the roles take them (npu_driver_sha256, cann_sha256)."""
    driver = {k: v for k, v in sums.items() if k.startswith(("Ascend-hdk-", "Atlas-A3-hdk-"))}
    cann = {k: v for k, v in sums.items() if k not in driver}
    return {"npu_driver_sha256": driver, "cann_sha256": cann}


def build_packages(args: argparse.Namespace) -> dict[str, str]:
    out = Path(args.out)
    corrupt = set(args.corrupt or [])
    if args.set:  # versions of a locked set from the project's version matrix
        from ascend_serve.stack.matrix import load_matrix, resolve

        chosen = resolve(load_matrix(), args.set)
        args.driver, args.cann = args.driver or chosen.hdk, args.cann or chosen.cann
        args.firmware = args.firmware or chosen.firmware
    if not args.driver:
        raise SystemExit("packages needs --driver or --set")
    if not args.firmware:
        raise SystemExit("packages needs --firmware, or a --set whose firmware the matrix names")
    pkgs = [
        Package("driver", args.driver, args.chip, args.arch),
        Package("firmware", args.firmware, args.chip, args.arch, hdk=args.driver),
    ]
    if args.cann:
        pkgs += [
            Package(kind, args.cann, args.chip, args.arch)
            for kind in ("toolkit", "kernels", "nnal")
        ]
    result: dict[str, str] = {}
    for pkg in pkgs:
        path = build(pkg, out)
        result[pkg.filename] = sha256_of(path)
        if pkg.kind in corrupt:  # pinned checksum of the good file, damaged file on disk
            build(pkg, out, corrupt=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend_sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)

    node_p = sub.add_parser("node", help="create, start or remove a simulated node")
    node_sub = node_p.add_subparsers(dest="action", required=True)
    create_p = node_sub.add_parser("create")
    create_p.add_argument("dir")
    up_p = node_sub.add_parser("up")
    up_p.add_argument("name")
    for p in (create_p, up_p):
        p.add_argument("--model", choices=sorted(SERVER_MODELS), default="atlas800-a2")
        p.add_argument("--npus", type=int)
    create_p.add_argument("--health", action="append", default=[], metavar="NPU=STATE")
    up_p.add_argument("--image", default=DEFAULT_IMAGE)
    up_p.add_argument("--mirror", type=Path, help="package mirror directory to mount")
    up_p.add_argument("--wheelhouse", type=Path, help="wheel directory to mount (pip find-links)")
    up_p.add_argument("--ca-bundle", type=Path, help="CA bundle file to mount (pip's PIP_CERT)")
    up_p.add_argument("--ssh", action="store_true",
                      help="mount the test bed's authorized_keys (reached over SSH: proxyssh)")
    down_p = node_sub.add_parser("down")
    down_p.add_argument("name")

    fault_p = sub.add_parser("fault", help="arm a one-shot fault on a node")
    fault_p.add_argument("dir")
    fault_p.add_argument("fault", choices=["installer_crash"])
    fault_p.add_argument("subject", help="package kind, e.g. driver")
    fault_p.add_argument("--times", type=int, default=1)

    health_p = sub.add_parser("health", help="set the health of one NPU's chips")
    health_p.add_argument("dir")
    health_p.add_argument("npu", type=int)
    health_p.add_argument("state", choices=HEALTH_STATES)

    code_p = sub.add_parser("fault-code", help="put a chip in Alarm with error codes the "
                            "corpus shows (no code: clear)")
    code_p.add_argument("dir")
    code_p.add_argument("npu", type=int)
    code_p.add_argument("codes", nargs="*")
    code_p.add_argument("--chip", type=int, default=0)

    log_p = sub.add_parser("unit-log", help="make the serving unit fail with an HCCL timeout "
                           "(EI0006) in its log, in the corpus's format; clear removes it")
    log_p.add_argument("dir")
    log_p.add_argument("fault", choices=["hccl-timeout", "clear"])
    log_p.add_argument("--pid", type=int, default=749)
    link_p = sub.add_parser("link", help="take one device NIC's link down, or clear that fault")
    link_p.add_argument("dir")
    link_p.add_argument("device", type=int)
    link_p.add_argument("state", type=str.upper, choices=["DOWN", "UP"])

    pkg_p = sub.add_parser("packages", help="build vendor installers; prints name -> sha256")
    pkg_p.add_argument("out")
    pkg_p.add_argument("--set", help="take driver, firmware and CANN versions from this "
                       "matrix set")
    pkg_p.add_argument("--driver")
    pkg_p.add_argument("--firmware", help="firmware version (default: the --set's)")
    pkg_p.add_argument("--cann")
    pkg_p.add_argument("--chip", default="910b")
    pkg_p.add_argument("--arch", default=os.uname().machine)
    pkg_p.add_argument("--corrupt", action="append", choices=["driver", "firmware", "toolkit",
                                                               "kernels", "nnal"])
    pkg_p.add_argument("--vars-file", help="also write the pins as Ansible variables (YAML)")

    conda_p = sub.add_parser("miniconda", help="build the Miniconda installer test double")
    conda_p.add_argument("out")
    conda_p.add_argument("--arch", default=os.uname().machine)
    conda_p.add_argument("--vars-file", help="write python_env's installer variables (YAML)")

    args = parser.parse_args(argv)
    if args.cmd == "node":
        if args.action == "create":
            create_node(Path(args.dir), args.model, args.npus, args.health)
        elif args.action == "up":
            print(node_up(args.name, args.model, args.npus, args.image, args.mirror,
                          args.wheelhouse, args.ca_bundle, args.ssh))
        else:
            subprocess.run(["podman", "rm", "-f", "--ignore", args.name], check=True)
    elif args.cmd in ("fault", "health", "link", "fault-code", "unit-log"):
        path = Path(args.dir) / "node.json"
        node = Node.load(path)
        if args.cmd == "fault":
            node.faults.setdefault(args.fault, {})[args.subject] = args.times
        elif args.cmd == "link":
            set_link(node, args.device, args.state)
        elif args.cmd == "fault-code":
            set_fault_codes(node, args.npu, args.chip, args.codes)
        elif args.cmd == "unit-log":
            set_unit_log_fault(node, args.fault, args.pid)
        else:
            set_health(node, args.npu, args.state)
        node.save(path)
    elif args.cmd == "miniconda":
        name, digest = build_installer(Path(args.out), args.arch)
        if args.vars_file:
            Path(args.vars_file).write_text(
                "---\n# Generated by python -m ascend_sim miniconda (a test double).\n"
                + json.dumps({"python_env_conda_installer": name,
                              "python_env_conda_sha256": digest,
                              "python_env_conda_artifact_dir": str(Path(args.out).resolve())},
                             indent=2) + "\n"
            )
        print(json.dumps({name: digest}))
    else:
        sums = build_packages(args)
        if args.vars_file:
            Path(args.vars_file).write_text(
                "---\n# Generated by python -m ascend_sim packages: pinned installer sha256.\n"
                + json.dumps(pins_by_role(sums), indent=2, sort_keys=True) + "\n"
            )
        json.dump(sums, sys.stdout, indent=2, sort_keys=True)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
