"""A test double of the Miniconda installer (no Miniconda artifact is reachable from test hosts).

It honours the documented CLI of ``Miniconda3-<ver>-Linux-<arch>.sh`` and of the ``conda`` it
installs, as far as the python_env role uses them:

- installer: ``-b`` (batch: no license prompt, no shell-profile changes), ``-p PREFIX`` (default
  ``$HOME/miniconda3``), ``-u`` (update an existing prefix), ``-h``; an existing prefix without
  ``-u`` is refused with Miniconda's message; without ``-b`` the license prompt needs "yes".
- ``conda --version``; ``conda create [-y|--yes] (-p|--prefix) ENV [--override-channels]
  [(-c|--channel) CHANNEL ...] python=X.Y`` (an existing environment is replaced, as conda does
  after its confirmation; the channels are reported as conda prints them, the Python still comes
  from the node); ``conda info --json``.

What it cannot do: provide any Python other than the node's system Python. Asking for another
version fails like conda does when a channel lacks the package (PackagesNotFoundError). The base
installation and every environment are venvs of the system Python.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CONDA_VERSION = "25.5.1"

# The `conda` entry point: standard library only, runs on the node's system Python.
CONDA_SCRIPT = r'''#!/usr/bin/env python3
"""conda (ascend-serve test double of Miniconda''' + "'" + r'''s conda)."""
import json
import os
import shutil
import subprocess
import sys

VERSION = "@VERSION@"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def system_python():
    return "%d.%d" % sys.version_info[:2]


def create(args):
    prefix = None
    specs = []
    channels = []
    override = False
    yes = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-p", "--prefix"):
            prefix = args[i + 1]
            i += 2
            continue
        if arg in ("-c", "--channel"):
            channels.append(args[i + 1])
            i += 2
            continue
        if arg == "--override-channels":
            override = True
        elif arg in ("-y", "--yes"):
            yes = True
        elif arg.startswith("-"):
            sys.stderr.write("conda create: unsupported option %s\n" % arg)
            return 2
        else:
            specs.append(arg)
        i += 1
    if not prefix:
        sys.stderr.write("CondaValueError: one of -p/--prefix is required here\n")
        return 1
    python = [s.split("=", 1)[1] for s in specs if s.startswith("python=")]
    others = [s for s in specs if not s.startswith("python=")]
    if others:
        sys.stderr.write("PackagesNotFoundError: this double installs python only: %s\n" % others)
        return 1
    wanted = python[0] if python else system_python()
    if wanted != system_python() and not system_python().startswith(wanted + "."):
        sys.stderr.write(
            "PackagesNotFoundError: The following packages are not available from current "
            "channels:\n\n  - python=%s\n" % wanted
        )
        return 1
    if os.path.exists(prefix) and os.listdir(prefix):
        if not yes:
            sys.stderr.write("CondaSystemExit: %s exists; confirm with --yes\n" % prefix)
            return 1
        shutil.rmtree(prefix)
    if override and not channels:
        sys.stderr.write("CondaValueError: --override-channels needs at least one --channel\n")
        return 1
    used = channels + ([] if override else ["defaults"])
    sys.stdout.write("Channels:\n%s\nPlatform: linux-%s\nCollecting package metadata "
                     "(repodata.json): done\nSolving environment: done\n\n"
                     % ("\n".join(" - " + c for c in used), os.uname().machine))
    subprocess.check_call([sys.executable, "-m", "venv", prefix])
    os.makedirs(os.path.join(prefix, "conda-meta"), exist_ok=True)
    with open(os.path.join(prefix, "conda-meta", "history"), "w") as handle:
        handle.write("# cmd: conda create --prefix %s%s python=%s\n" % (
            prefix, "".join(" --channel " + c for c in channels), wanted))
    sys.stdout.write(
        "Preparing transaction: done\nVerifying transaction: done\nExecuting transaction: done\n"
        "#\n# To activate this environment, use\n#\n#     $ conda activate %s\n#\n" % prefix
    )
    return 0


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write("usage: conda [-h] [-V] command ...\n")
        return 0
    if argv[0] in ("-V", "--version"):
        sys.stdout.write("conda %s\n" % VERSION)
        return 0
    if argv[0] == "create":
        return create(argv[1:])
    if argv[0] == "info" and "--json" in argv:
        envs = [ROOT]
        sys.stdout.write(json.dumps({"conda_version": VERSION, "root_prefix": ROOT,
                                     "envs": envs, "python_version": system_python()}) + "\n")
        return 0
    sys.stderr.write("conda: command %r is not part of this test double\n" % argv[0])
    return 2


sys.exit(main(sys.argv[1:]))
'''.replace("@VERSION@", CONDA_VERSION)

INSTALLER = r"""#!/bin/bash
# Miniconda3 installer (ascend-serve test double; see ascend_sim/miniconda.py).
set -eu
BATCH=0
UPDATE=0
PREFIX="${HOME:-/root}/miniconda3"
usage() {
    echo "usage: $0 [options]"
    echo ""
    echo "Installs Miniconda3 @VERSION@"
    echo ""
    echo "-b           run install in batch mode (without manual intervention),"
    echo "             it is expected the license terms (if any) are agreed upon"
    echo "-h           print this help message and exit"
    echo "-p PREFIX    install prefix, defaults to $PREFIX, must not contain spaces."
    echo "-u           update an existing installation"
}
while getopts "bfhp:stu" opt; do
    case "$opt" in
        b) BATCH=1 ;;
        h) usage; exit 2 ;;
        p) PREFIX="$OPTARG" ;;
        u) UPDATE=1 ;;
        f|s|t) ;;
        *) usage; exit 2 ;;
    esac
done
if [ "$BATCH" = 0 ]; then
    printf "Do you accept the license terms? [yes|no]\n>>> "
    read -r answer
    if [ "$answer" != "yes" ]; then
        echo "The license agreement wasn't approved, aborting installation."
        exit 2
    fi
fi
if [ -e "$PREFIX" ] && [ "$UPDATE" = 0 ]; then
    echo "ERROR: File or directory already exists: '$PREFIX'" >&2
    echo "If you want to update an existing installation, use the -u option." >&2
    exit 1
fi
echo "PREFIX=$PREFIX"
echo "Unpacking payload ..."
python3 -m venv "$PREFIX"
cat > "$PREFIX/bin/conda" <<'CONDA_EOF'
@CONDA@
CONDA_EOF
chmod 0755 "$PREFIX/bin/conda"
mkdir -p "$PREFIX/conda-meta"
echo "installation finished."
"""


def installer_name(arch: str, python_tag: str = "py311") -> str:
    return f"Miniconda3-{python_tag}_{CONDA_VERSION}-0-Linux-{arch}.sh"


def build_installer(out_dir: Path, arch: str) -> tuple[str, str]:
    """Write the installer double; return (file name, sha256)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = installer_name(arch)
    body = INSTALLER.replace("@VERSION@", CONDA_VERSION).replace("@CONDA@", CONDA_SCRIPT.rstrip())
    path = out_dir / name
    path.write_text(body, encoding="utf-8")
    path.chmod(0o755)
    return name, hashlib.sha256(body.encode()).hexdigest()
