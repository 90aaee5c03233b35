"""The test mirror (``ascend_sim.mirror``): apt flat repository, rpm repository, upstream line."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from paths import ROLES

from ascend_sim import mirror

ROOT = Path(__file__).resolve().parents[2]
KERNEL = "6.1.0-13-amd64"
RPM_KERNEL = "5.10.0-182.0.0.95.oe2203sp3.x86_64"
RPM_NEWER = "5.10.0-216.0.0.115.oe2203sp4.x86_64"
needs_rpm = pytest.mark.skipif(
    not (shutil.which("rpmbuild") and shutil.which("createrepo_c")),
    reason="rpmbuild and createrepo_c (Debian packages rpm, createrepo-c) are not installed",
)


def _stanzas(text: str) -> list[dict[str, str]]:
    return [
        dict(line.split(": ", 1) for line in block.splitlines())
        for block in text.strip().split("\n\n")
    ]


def _deb_listing(deb: Path) -> str:
    return subprocess.run(["dpkg-deb", "-c", str(deb)], check=True, capture_output=True,
                          text=True).stdout


# --- apt ------------------------------------------------------------------------------------


def test_apt_repo_has_headers_with_build_link(tmp_path: Path) -> None:
    debs = mirror.build_apt_repo(tmp_path, KERNEL, "amd64")
    names = sorted(d.name for d in debs)
    assert names == [f"linux-headers-{KERNEL}_6.1.0-1_amd64.deb",
                     f"linux-image-{KERNEL}_6.1.0-1_amd64.deb"]
    listing = _deb_listing(tmp_path / names[0])
    assert f"./usr/src/linux-headers-{KERNEL}/Makefile" in listing
    assert f"./lib/modules/{KERNEL}/build -> /usr/src/linux-headers-{KERNEL}" in listing
    assert "root/root" in listing
    control = subprocess.run(["dpkg-deb", "-f", str(tmp_path / names[0])], check=True,
                             capture_output=True, text=True).stdout
    assert f"Package: linux-headers-{KERNEL}" in control
    assert "Architecture: amd64" in control


def test_apt_indexes_match_the_files(tmp_path: Path) -> None:
    mirror.build_apt_repo(tmp_path, KERNEL, "arm64")
    packages = (tmp_path / "Packages").read_text()
    assert gzip.decompress((tmp_path / "Packages.gz").read_bytes()).decode() == packages
    for stanza in _stanzas(packages):
        deb = tmp_path / stanza["Filename"]
        assert stanza["Architecture"] == "arm64"
        assert int(stanza["Size"]) == deb.stat().st_size
        assert stanza["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()
    release = (tmp_path / "Release").read_text()
    for name in ("Packages", "Packages.gz"):
        data = (tmp_path / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}\n" in release


def test_apt_repo_is_reproducible(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    mirror.build_apt_repo(first, KERNEL, "amd64")
    mirror.build_apt_repo(second, KERNEL, "amd64")
    for path in sorted(first.iterdir()):
        assert path.read_bytes() == (second / path.name).read_bytes(), path.name


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("apt-get"), reason="needs root apt")
def test_apt_reads_the_repo(tmp_path: Path) -> None:
    """apt itself accepts the repository: update, resolve and download (hash-checked)."""
    repo = tmp_path / "repo"
    mirror.build_apt_repo(repo, KERNEL, mirror.dpkg_architecture())
    state = tmp_path / "state"
    for sub in ("lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True)
    (state / "sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
    opts = [f"-oDir::Etc::SourceList={state}/sources.list", "-oDir::Etc::SourceParts=/nonexistent",
            f"-oDir::State::Lists={state}/lists", f"-oDir::Cache={state}/cache",
            "-oAPT::Sandbox::User=root", "-oDebug::NoLocking=1"]
    subprocess.run(["apt-get", *opts, "-q", "update"], check=True, capture_output=True)
    policy = subprocess.run(["apt-cache", *opts, "policy", f"linux-headers-{KERNEL}"],
                            check=True, capture_output=True, text=True).stdout
    assert "Candidate: 6.1.0-1" in policy
    subprocess.run(["apt-get", *opts, "-q", "download", f"linux-headers-{KERNEL}"],
                   check=True, capture_output=True, cwd=tmp_path)
    assert (tmp_path / f"linux-headers-{KERNEL}_6.1.0-1_{mirror.dpkg_architecture()}.deb").is_file()


@pytest.mark.parametrize(("kernel", "version"), [
    ("6.18.44-fc-v1045", "6.18.44-1"),
    ("5.15.0-91-generic", "5.15.0-1"),
    ("custom", "0-1"),
])
def test_kernel_version(kernel: str, version: str) -> None:
    assert mirror._kernel_version(kernel) == version


# --- rpm ------------------------------------------------------------------------------------


def test_parse_rpm_kernel() -> None:
    assert mirror.parse_rpm_kernel(RPM_KERNEL) == ("5.10.0", "182.0.0.95.oe2203sp3", "x86_64")
    with pytest.raises(SystemExit, match="not in rpm form"):
        mirror.parse_rpm_kernel("6.18.44-fc-v1045")


def test_package_names_from_the_role_vars() -> None:
    names = mirror.package_names_from_vars(ROLES / "os_base/vars/RedHat.yml")
    assert set(names) >= {"gcc", "gcc-c++", "dkms", "numactl-devel",
                          "python3-dnf-plugin-versionlock"}
    assert not [n for n in names if "{" in n or "/" in n or "*" in n]
    assert "rpm" not in names and "--query" not in names  # the query's argv is no package list


def _rpm_query(path: Path, fmt: str) -> str:
    return subprocess.run(["rpm", "-qp", "--qf", fmt, str(path)], check=True,
                          capture_output=True, text=True).stdout


@needs_rpm
def test_rpm_repo(tmp_path: Path) -> None:
    built = mirror.build_rpm_repo(tmp_path, [RPM_KERNEL, RPM_NEWER], ["gcc", "gcc-c++", "kernel"])
    names = sorted(p.name for p in built)
    assert names == sorted([
        f"kernel-{RPM_KERNEL}.rpm", f"kernel-devel-{RPM_KERNEL}.rpm",
        f"kernel-headers-{RPM_KERNEL}.rpm", f"kernel-{RPM_NEWER}.rpm",
        f"kernel-devel-{RPM_NEWER}.rpm", f"kernel-headers-{RPM_NEWER}.rpm",
        "gcc-1.0-1.noarch.rpm", "gcc-c++-1.0-1.noarch.rpm",
    ])
    devel = tmp_path / f"kernel-devel-{RPM_KERNEL}.rpm"
    assert _rpm_query(devel, "%{NAME} %{VERSION} %{RELEASE} %{ARCH}") == (
        "kernel-devel 5.10.0 182.0.0.95.oe2203sp3 x86_64")
    files = subprocess.run(["rpm", "-qlvp", str(devel)], check=True, capture_output=True,
                           text=True).stdout
    assert f"/lib/modules/{RPM_KERNEL}/build -> /usr/src/kernels/{RPM_KERNEL}" in files
    assert f"/usr/src/kernels/{RPM_KERNEL}/Makefile" in files
    requires = _rpm_query(tmp_path / "gcc-c++-1.0-1.noarch.rpm", "[%{REQUIRENAME}\n]")
    assert all(r.startswith("rpmlib(") for r in requires.split())  # installable on an empty rpmdb
    repomd = (tmp_path / "repodata/repomd.xml").read_text()
    assert 'type="primary"' in repomd
    primary = next((tmp_path / "repodata").glob("*-primary.xml.gz"))
    assert gzip.decompress(primary.read_bytes()).decode().count("<package ") == len(built)


@needs_rpm
def test_rpm_repo_is_reproducible(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    mirror.build_rpm_repo(first, [RPM_KERNEL], ["gcc"])
    mirror.build_rpm_repo(second, [RPM_KERNEL], ["gcc"])
    for path in sorted(p for p in first.rglob("*") if p.is_file()):
        assert path.read_bytes() == (second / path.relative_to(first)).read_bytes(), path.name


# --- upstream -------------------------------------------------------------------------------


def test_upstream_from_deb822(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/debian.sources").write_text(
        "Types: deb\n# comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n"
    )
    assert mirror.upstream_line(tmp_path) == (
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://mirror.example/debian bookworm main contrib")
    assert mirror.upstream_line(tmp_path, suite="trixie").split()[3] == "trixie"


def test_upstream_from_sources_list(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian buster main\n"
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb http://mirror.example/debian bookworm main\n"
    )
    assert mirror.upstream_line(tmp_path) == "deb http://mirror.example/debian bookworm main"


def test_upstream_without_sources(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no Debian mirror"):
        mirror.upstream_line(tmp_path)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mirror.main(["apt", str(tmp_path / "apt"), "--kernel", KERNEL, "--arch", "amd64"]) == 0
    assert f"linux-headers-{KERNEL}_6.1.0-1_amd64.deb" in capsys.readouterr().out
