"""Local package mirrors for tests: what an air-gapped fleet's internal mirror serves.

Real Ascend fleets have no internet; their kernel headers and distribution packages come from an
internal mirror. The test machine's running kernel (shared by every container) has no package in
any public repository, so tests build that mirror here, on the controller, and mount it into the
node read-only:

  python -m ascend_sim.mirror apt OUT [--kernel K] [--arch A]
      flat apt repository (``deb [trusted=yes] file:OUT ./``) with ``linux-headers-K`` (the build
      tree ``/usr/src/linux-headers-K`` with its ``Makefile`` and the ``/lib/modules/K/build``
      link, as Debian ships it) and ``linux-image-K`` (stands for the installed running kernel).
      K defaults to the running kernel (``uname -r``), A to ``dpkg --print-architecture``.
  python -m ascend_sim.mirror rpm OUT --kernel K [--kernel K2] [--packages-from VARS.yml]
                                     [--package NAME]...
      rpm repository (rpmbuild + createrepo_c) with openEuler-style ``kernel-K``,
      ``kernel-devel-K`` (``/usr/src/kernels/K`` and the ``build`` link) and ``kernel-headers-K``
      for each rpm-form kernel release ``VERSION-RELEASE.ARCH`` given (a newer one stands for an
      unplanned upgrade), and an empty noarch package for each other name: every plain package
      name listed in VARS.yml (a role's vars file) and --package.
  python -m ascend_sim.mirror upstream FILE [--suite S]
      write the one-line apt source of this machine's own Debian mirror (read from its apt
      sources, never a hard-coded host): the "internal mirror" of distribution packages.

Everything is reproducible: fixed timestamps (``SOURCE_DATE_EPOCH``), sorted indexes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

EPOCH = 1704067200  # 2024-01-01T00:00:00Z: every timestamp in a built mirror
RELEASE_DATE = "Mon, 01 Jan 2024 00:00:00 UTC"
MAINTAINER = "ascend-serve test mirror <root@localhost>"
RPM_KERNEL_RE = re.compile(r"^(?P<version>[^-]+)-(?P<release>[^-]+)\.(?P<arch>[A-Za-z0-9_]+)$")
RPM_KERNEL_NAMES = ("kernel", "kernel-devel", "kernel-headers")
APT_SOURCES = Path("/etc/apt")


@dataclass
class DebPackage:
    """A binary package to build: control fields, regular files and symlinks (absolute paths)."""

    name: str
    version: str
    arch: str
    description: str
    files: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.arch}.deb"

    def control(self) -> str:
        return (
            f"Package: {self.name}\nVersion: {self.version}\nArchitecture: {self.arch}\n"
            f"Maintainer: {MAINTAINER}\nSection: kernel\nPriority: optional\n"
            f"Description: {self.description}\n"
        )


def _kernel_version(kernel: str) -> str:
    """A Debian version for a kernel release string: its leading dotted number, revision 1."""
    match = re.match(r"\d+(?:\.\d+)*", kernel)
    return f"{match.group(0) if match else '0'}-1"


def _kernel_makefile(kernel: str, tree: str) -> str:
    numbers = [*re.findall(r"\d+", kernel.split("-")[0]), "0", "0", "0"]
    return (
        f"# Kernel build tree of {kernel} (headers and build infrastructure only).\n"
        f"VERSION = {numbers[0]}\nPATCHLEVEL = {numbers[1]}\nSUBLEVEL = {numbers[2]}\n"
        f"KERNELRELEASE = {kernel}\nsrctree := {tree}\n"
        "modules modules_install clean:\n\t@echo \"$@: building against $(KERNELRELEASE)\"\n"
    )


def deb_packages(kernel: str, arch: str) -> list[DebPackage]:
    version = _kernel_version(kernel)
    tree = f"/usr/src/linux-headers-{kernel}"
    headers = DebPackage(
        name=f"linux-headers-{kernel}", version=version, arch=arch,
        description=f"Header files and build tree of Linux {kernel}",
        files={
            f"{tree}/Makefile": _kernel_makefile(kernel, tree),
            f"{tree}/.config": f"# Linux kernel configuration of {kernel}\nCONFIG_MODULES=y\n",
            f"{tree}/include/config/kernel.release": f"{kernel}\n",
            f"{tree}/include/generated/utsrelease.h": f'#define UTS_RELEASE "{kernel}"\n',
        },
        links={f"/lib/modules/{kernel}/build": tree},
    )
    image = DebPackage(
        name=f"linux-image-{kernel}", version=version, arch=arch,
        description=f"Linux {kernel} kernel image (stands for the installed running kernel)",
        files={f"/boot/config-{kernel}": f"# Linux kernel configuration of {kernel}\n"},
    )
    return [headers, image]


def _reproducible_env() -> dict[str, str]:
    return dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH), LC_ALL="C", TZ="UTC")


def _touch_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)


def build_deb(pkg: DebPackage, out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="ascend-mirror-deb.") as tmp:
        stage = Path(tmp) / "stage"
        (stage / "DEBIAN").mkdir(parents=True)
        (stage / "DEBIAN" / "control").write_text(pkg.control())
        for path, content in pkg.files.items():
            target = stage / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(0o644)
        for path, dest in pkg.links.items():
            link = stage / path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(dest)
        for directory in [stage, *stage.rglob("*")]:
            if directory.is_dir() and not directory.is_symlink():
                directory.chmod(0o755)
        _touch_tree(stage)
        deb = out / pkg.filename
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(stage), str(deb)],
            check=True, capture_output=True, env=_reproducible_env(),
        )
    deb.chmod(0o644)
    return deb


def _digests(path: Path) -> tuple[str, str, int]:
    data = path.read_bytes()
    return hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest(), len(data)  # noqa: S324


def write_apt_indexes(out: Path, packages: list[tuple[DebPackage, Path]]) -> None:
    """``Packages``, ``Packages.gz`` and an unsigned ``Release`` of a flat repository."""
    stanzas = []
    for pkg, deb in sorted(packages, key=lambda item: item[0].name):
        md5, sha256, size = _digests(deb)
        stanzas.append(pkg.control() + f"Filename: ./{deb.name}\nSize: {size}\n"
                       f"MD5sum: {md5}\nSHA256: {sha256}\n")
    index = "\n".join(stanzas)
    (out / "Packages").write_text(index)
    with (out / "Packages.gz").open("wb") as raw, gzip.GzipFile(
        filename="", fileobj=raw, mode="wb", mtime=0
    ) as gz:
        gz.write(index.encode())
    md5_lines, sha_lines = [], []
    for name in ("Packages", "Packages.gz"):
        md5, sha256, size = _digests(out / name)
        md5_lines.append(f" {md5} {size} {name}")
        sha_lines.append(f" {sha256} {size} {name}")
    (out / "Release").write_text(
        "Origin: ascend-serve test mirror\nLabel: ascend-serve test mirror\n"
        f"Date: {RELEASE_DATE}\nMD5Sum:\n" + "\n".join(md5_lines)
        + "\nSHA256:\n" + "\n".join(sha_lines) + "\n"
    )
    for name in ("Packages", "Packages.gz", "Release"):
        (out / name).chmod(0o644)


def _fresh_dir(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    out.chmod(0o755)


def build_apt_repo(out: Path, kernel: str, arch: str) -> list[Path]:
    _fresh_dir(out)
    built = [(pkg, build_deb(pkg, out)) for pkg in deb_packages(kernel, arch)]
    write_apt_indexes(out, built)
    return [deb for _, deb in built]


def dpkg_architecture() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True,
                          text=True).stdout.strip()


# -- rpm ------------------------------------------------------------------------------------------

def parse_rpm_kernel(kernel: str) -> tuple[str, str, str]:
    """openEuler's ``uname -r`` (``5.10.0-182.0.0.95.oe2203sp3.aarch64``): version, release, arch"""
    match = RPM_KERNEL_RE.match(kernel)
    if not match:
        raise SystemExit(f"kernel release {kernel!r} is not in rpm form VERSION-RELEASE.ARCH")
    return match.group("version"), match.group("release"), match.group("arch")


def package_names_from_vars(path: Path) -> list[str]:
    """Every plain package name in a role's vars file: the untemplated strings of its top-level
    lists named ``*_packages`` (other lists, e.g. a command's argv, are not package names)."""
    data = yaml.safe_load(path.read_text()) or {}
    names: list[str] = []
    for key, value in data.items():
        if not str(key).endswith("_packages"):
            continue
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            names += [v for v in value if "{" not in v and re.fullmatch(r"[A-Za-z0-9_.+-]+", v)]
    return names


_SPEC_MACROS = """\
%define debug_package %{nil}
%define __os_install_post %{nil}
%define _build_id_links none
%define use_source_date_epoch_as_buildtime 1
%define clamp_mtime_to_source_date_epoch 1
%define _buildhost localhost
"""


def kernel_spec(kernel: str) -> str:
    version, release, _ = parse_rpm_kernel(kernel)
    tree = f"/usr/src/kernels/{kernel}"
    return _SPEC_MACROS + f"""
Name: kernel
Version: {version}
Release: {release}
Summary: Linux kernel {kernel} (stands for the installed running kernel)
License: GPL-2.0-only

%description
Linux kernel {kernel}, test mirror build.

%package devel
Summary: Build tree of Linux {kernel}
%description devel
Development package for building kernel modules against {kernel}.

%package headers
Summary: Header files of Linux {kernel}
%description headers
Kernel headers of {kernel}.

%install
mkdir -p %{{buildroot}}/boot %{{buildroot}}{tree}/include/config %{{buildroot}}/lib/modules/{kernel}
echo '# Linux kernel configuration of {kernel}' > %{{buildroot}}/boot/config-{kernel}
cat > %{{buildroot}}{tree}/Makefile <<'EOF'
{_kernel_makefile(kernel, tree)}EOF
echo '{kernel}' > %{{buildroot}}{tree}/include/config/kernel.release
ln -s {tree} %{{buildroot}}/lib/modules/{kernel}/build

%files
/boot/config-{kernel}

%files devel
{tree}
/lib/modules/{kernel}/build

%files headers
"""


def dummy_spec(names: list[str]) -> str:
    parts = [_SPEC_MACROS, """
Name: ascend-mirror-dummy
Version: 1.0
Release: 1
Summary: Empty packages standing for distribution packages
License: Apache-2.0
BuildArch: noarch

%description
Test mirror.
"""]
    for name in names:
        parts.append(
            f"\n%package -n {name}\nSummary: {name} (empty test package)\n"
            f"%description -n {name}\nEmpty package named like the distribution's {name}.\n"
            f"%files -n {name}\n"
        )
    return "".join(parts)


def _rpmbuild(spec_text: str, name: str, arch: str, out: Path) -> list[Path]:
    with tempfile.TemporaryDirectory(prefix="ascend-mirror-rpm.") as tmp:
        top = Path(tmp)
        spec = top / f"{name}.spec"
        spec.write_text(spec_text)
        subprocess.run(
            ["rpmbuild", "-bb", "--quiet", "--target", arch, "--define", f"_topdir {top}",
             "--define", f"_tmppath {top}/buildtmp", str(spec)],
            check=True, capture_output=True, text=True, env=_reproducible_env(),
        )
        built = []
        for rpm in sorted((top / "RPMS").rglob("*.rpm")):
            dest = out / rpm.name
            shutil.copyfile(rpm, dest)
            dest.chmod(0o644)
            os.utime(dest, (EPOCH, EPOCH))
            built.append(dest)
    return built


def build_rpm_repo(out: Path, kernels: list[str], names: list[str]) -> list[Path]:
    _fresh_dir(out)
    dummies = sorted(set(names) - set(RPM_KERNEL_NAMES))
    built: list[Path] = []
    for kernel in kernels:
        built += _rpmbuild(kernel_spec(kernel), "kernel", parse_rpm_kernel(kernel)[2], out)
    if dummies:
        built += _rpmbuild(dummy_spec(dummies), "dummy", "noarch", out)
    subprocess.run(["createrepo_c", "--quiet", "--no-database", "--revision", str(EPOCH),
                    "--set-timestamp-to-revision", str(out)],
                   check=True, capture_output=True, env=_reproducible_env())
    for path in [out, *out.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return built


# -- upstream -------------------------------------------------------------------------------------

def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if current:
                stanzas.append(current)
            current = {}
        elif not line.startswith("#") and ":" in line and not line[0].isspace():
            key, _, value = line.partition(":")
            current[key.strip().lower()] = value.strip()
    return stanzas


def upstream_line(apt_dir: Path = APT_SOURCES, suite: str | None = None) -> str:
    """The first Debian (non-security) source this machine uses, as one ``deb`` line."""
    sources = apt_dir / "sources.list.d" / "debian.sources"
    if sources.is_file():
        for stanza in _deb822_stanzas(sources.read_text()):
            uri = stanza.get("uris", "").split()
            if ("deb" in stanza.get("types", "").split() and uri and "security" not in uri[0]
                    and stanza.get("enabled", "yes") != "no"):
                suites = stanza.get("suites", "").split()
                options = f"[signed-by={stanza['signed-by']}] " if "signed-by" in stanza else ""
                return (f"deb {options}{uri[0]} {suite or suites[0]} "
                        f"{stanza.get('components', 'main')}")
    listfile = apt_dir / "sources.list"
    if listfile.is_file():
        for line in listfile.read_text().splitlines():
            words = line.split()
            if len(words) >= 4 and words[0] == "deb" and "security" not in line:
                rest = words[1:]
                options = rest.pop(0) + " " if rest[0].startswith("[") else ""
                return f"deb {options}{rest[0]} {suite or rest[1]} {' '.join(rest[2:])}"
    raise SystemExit(f"no Debian mirror found in the apt sources under {apt_dir}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend_sim.mirror", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    apt_p = sub.add_parser("apt", help="flat apt repository with the kernel's headers")
    apt_p.add_argument("out")
    apt_p.add_argument("--kernel", default=os.uname().release)
    apt_p.add_argument("--arch")
    rpm_p = sub.add_parser("rpm", help="rpm repository with openEuler-style kernel packages")
    rpm_p.add_argument("out")
    rpm_p.add_argument("--kernel", action="append", required=True,
                       help="rpm-form release, e.g. 5.10.0-1.oe2203.x86_64 (repeatable)")
    rpm_p.add_argument("--packages-from", action="append", default=[], metavar="VARS_YML")
    rpm_p.add_argument("--package", action="append", default=[], metavar="NAME")
    up_p = sub.add_parser("upstream", help="this machine's Debian mirror as one apt source line")
    up_p.add_argument("file")
    up_p.add_argument("--suite")

    args = parser.parse_args(argv)
    if args.cmd == "apt":
        for deb in build_apt_repo(Path(args.out), args.kernel, args.arch or dpkg_architecture()):
            print(deb)
    elif args.cmd == "rpm":
        names = list(args.package)
        for vars_file in args.packages_from:
            names += package_names_from_vars(Path(vars_file))
        for rpm in build_rpm_repo(Path(args.out), args.kernel, names):
            print(rpm)
    else:
        path = Path(args.file)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(upstream_line(suite=args.suite) + "\n")
        print(path.read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
