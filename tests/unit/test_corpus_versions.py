"""The version-file readers against REAL install-tree files (tests/data/corpus/versions).

Every sample there is read by its reader and must give what its ``.expected.json`` says; a file in
a layout no reader knows fails naming the file and the line; ``cann_facts`` finds the right
toolkit, kernels/ops and NNAL versions in trees built from the samples (the 8.2/8.3 layout with
``ascend-toolkit/latest`` a real directory of symlinks, and the 8.5 layout); and what the
simulator writes has the key structure of a real file of the same family.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paths
import pytest
from corpus import reading

from ansible_collections.ascend_serve.fleet.plugins.module_utils import ascend_files
from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import AscendFileError
from ascend_sim.devtools import installer

CORPUS = paths.CORPUS / "versions"
SAMPLES = sorted(p.name[: -len(".txt")] for p in CORPUS.glob("*.txt"))
MODULES = "ansible_collections.ascend_serve.fleet.plugins.modules"
cann_facts = importlib.import_module(f"{MODULES}.cann_facts")
collection_files = importlib.import_module(
    "ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files")

Reader = Callable[[str, str], dict[str, Any]]
READERS: dict[str, Reader] = {
    "driver": ascend_files.read_driver_info,
    "firmware": ascend_files.read_firmware_info,
    "toolkit_install_info": ascend_files.read_toolkit_install_info,
    "opp_kernel_version_info": ascend_files.read_component_version_info,
    "opp_version_info": ascend_files.read_component_version_info,
    "toolkit_component_version_info": ascend_files.read_component_version_info,
    "nnal_atb_version_info": ascend_files.read_nnal_atb_info,
    "version_cfg": ascend_files.read_version_cfg,
}
# Samples that are not one file: listings (used below to build trees) and the set_env.sh extract
# (the roles' ASCEND_TOOLKIT_HOME per release).
NOT_FILES = {"listing", "set_env_paths"}


def _text(name: str) -> str:
    return (CORPUS / f"{name}.txt").read_text(encoding="utf-8")


def _expected(name: str) -> dict[str, Any]:
    return reading(CORPUS / f"{name}.txt")


def test_the_reader_has_one_home_in_the_collection() -> None:
    """The package's reader is the collection's module_utils file; no copy in the package."""
    home = paths.PLUGINS / "module_utils" / "ascend_files.py"
    assert Path(str(ascend_files.__file__)).resolve() == home.resolve()
    assert Path(str(collection_files.__file__)).resolve() == home.resolve()
    assert not (paths.ROOT / "python/ascend_serve/node/ascend_files.py").exists()


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_reads_as_a_careful_human_reads_it(name: str) -> None:
    expected = _expected(name)
    kind = expected["kind"]
    if kind in NOT_FILES:
        return  # read by the tests below
    assert kind in READERS, f"{name}: no reader for kind {kind}"
    got = READERS[kind](_text(name), expected["file"])
    assert got["version"] == expected["version"]
    assert got["fields"] == expected["fields"]
    for key, value in got.items():  # every other field the reader returns that the human noted
        if key in expected:
            assert value == expected[key], key


def test_every_sample_kind_is_covered() -> None:
    kinds = {_expected(name)["kind"] for name in SAMPLES}
    assert kinds <= set(READERS) | NOT_FILES
    assert len(SAMPLES) == 29  # the README's count


@pytest.mark.parametrize(
    ("reader", "text", "message"),
    [
        # an invented NNAL layout (key=value) is not ATB's "key : value"
        (ascend_files.read_nnal_atb_info, "version=8.5.0\npackage_name=Ascend-cann-nnal\n",
         "line 1 'version=8.5.0': not a 'key : value' line"),
        # ATB's file is not a key=value file
        (ascend_files.read_component_version_info, _text("nnal-atb-8.2.RC1.B150"),
         "line 1 'Ascend-cann-atb : 8.2.RC1': not a key=value line"),
        (ascend_files.read_driver_info, "Version=25.5.0\n<html>not found</html>\n",
         "line 2 '<html>not found</html>'"),
        # a kernels file without the release line is not read as "no kernels"
        (ascend_files.read_component_version_info, "Version=8.5.0\n",
         "no version_dir= line"),
        (ascend_files.read_toolkit_install_info, "package_name=Ascend-cann-toolkit\n",
         "no version= line"),
        (ascend_files.read_nnal_atb_info, "    Platform : aarch64\n",
         "no 'Ascend-cann-atb : ' line"),
        (ascend_files.read_version_cfg, "toolkit_running_version=8.1.RC1\n",
         "not [<build>:<release>] entries"),
    ],
)  # fmt: skip
def test_an_unknown_layout_fails_naming_the_file_and_line(
        reader: Reader, text: str, message: str) -> None:
    with pytest.raises(AscendFileError, match="^/x/version.info: .*" + re.escape(message)):
        reader(text, "/x/version.info")


def test_ops_file_per_release() -> None:
    assert ascend_files.ops_version_info("8.2.RC1") == "opp_kernel/version.info"
    assert ascend_files.ops_version_info("8.3.RC1.alpha001") == "opp_kernel/version.info"
    assert ascend_files.ops_version_info("8.5.0") == "opp/version.info"
    assert ascend_files.ops_version_info("9.1.0-beta.3") == "opp/version.info"
    assert ascend_files.release_tuple("10.0.RC1") == (10, 0)


# --- cann_facts on trees built from the samples --------------------------------------------------

LL_RE = re.compile(r"^(?P<type>[dl-])[rwxs-]{9}\s+\d+\s+\S+\s+\S+\s+\d+\s+\w+\s+\d+\s+[\d:]+\s+"
                   r"(?P<name>[^ /]+)/?(?: -> (?P<target>\S+?)/?)?\*?$")


def _build_from_listing(directory: Path, listing: str, version: str) -> None:
    """Recreate an ``ll`` listing: directories, files, symlinks (targets moved to ``version``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for line in listing.splitlines():
        match = LL_RE.match(line.strip())
        if not match or match["name"] in (".", ".."):
            continue
        path = directory / match["name"]
        if match["type"] == "l":
            path.symlink_to(re.sub(r"^\.\./[^/]+/", f"../{version}/", match["target"]))
        elif match["type"] == "d":
            path.mkdir(exist_ok=True)
        else:
            path.write_text("")


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _nnal(base: Path, sample: str) -> None:
    """nnal/atb/<ver>/ and ``latest -> <ver>/`` (ls-nnal-atb-8.2.RC1.txt)."""
    version = ascend_files.read_nnal_atb_info(_text(sample), sample)["version"]
    _put(base / f"nnal/atb/{version}/version.info", _text(sample))
    (base / "nnal/atb/latest").symlink_to(f"{version}/")


@pytest.mark.parametrize(
    ("toolkit", "kernels", "version"),
    [
        ("toolkit-install-info-8.2.RC1-aarch64", "opp-kernel-version-8.2.RC1", "8.2.RC1"),
        ("toolkit-install-info-8.3.RC1.alpha001-aarch64", "opp-kernel-version-8.3.T5.0.B028",
         "8.3.RC1.alpha001"),
    ],
)  # fmt: skip
def test_cann_facts_with_latest_a_directory_of_symlinks(
        tmp_path: Path, toolkit: str, kernels: str, version: str) -> None:
    base = tmp_path / "Ascend"
    root = base / "ascend-toolkit" / version
    _put(root / "aarch64-linux/ascend_toolkit_install.info", _text(toolkit))
    _put(root / "opp_kernel/version.info", _text(kernels))
    _put(root / "toolkit/version.info", _text("toolkit-version-info-8.2.RC1"))
    # latest/ as the real listing shows it: a directory of per-component symlinks into
    # ../<version>/ with a real aarch64-linux/ directory, here holding the install info too.
    latest = base / "ascend-toolkit/latest"
    _build_from_listing(latest, _text("ls-toolkit-latest-8.2.RC2-symlinks"), version)
    assert latest.is_dir() and not latest.is_symlink()
    assert os.readlink(latest / "opp_kernel") == f"../{version}/opp_kernel"
    _put(latest / "aarch64-linux/ascend_toolkit_install.info", _text(toolkit))
    _nnal(base, "nnal-atb-8.2.RC1.B150")
    _put(base / "driver/version.info", _text("driver-25.0.rc1.1"))

    state = cann_facts.cann_state(str(base))

    assert state["toolkits"] == [  # latest is not a second toolkit
        {"version": version, "root": str(root), "kernels_version": version}]
    assert state["nnal_version"] == "8.2.RC1"
    assert state["driver_version"] == "25.0.rc1.1"


def test_cann_facts_cann_85_layout(tmp_path: Path) -> None:
    base = tmp_path / "Ascend"
    root = base / "cann-8.5.0"
    # No real 8.5 ascend_toolkit_install.info was found (corpus README): the 8.3.RC2 one, moved.
    info = _text("toolkit-install-info-8.3.RC2-aarch64").replace("8.3.RC2", "cann-8.5.0")
    info = info.replace("version=cann-8.5.0", "version=8.5.0").replace(
        "ascend-toolkit/cann-8.5.0", "cann-8.5.0")
    _put(root / "aarch64-linux/ascend_toolkit_install.info", info)
    _put(root / "opp/version.info", _text("opp-version-8.5.0.2.220-pypto-doc"))
    _put(base / "driver/version.info", _text("driver-25.3.rc1-pypto-doc"))
    _nnal(base, "nnal-atb-8.2.RC1.B150")
    # a leftover 8.3 tree: its kernels are read from opp_kernel/, never from opp/
    old = base / "ascend-toolkit/8.3.RC1.alpha001"
    _put(old / "aarch64-linux/ascend_toolkit_install.info",
         _text("toolkit-install-info-8.3.RC1.alpha001-aarch64"))
    _put(old / "opp/version.info", _text("opp-version-8.5.0.2.220-pypto-doc"))

    state = cann_facts.cann_state(str(base))

    assert state["toolkits"] == [
        {"version": "8.3.RC1.alpha001", "root": str(old), "kernels_version": ""},
        {"version": "8.5.0", "root": str(root), "kernels_version": "8.5.0"},
    ]
    assert state["driver_version"] == "25.3.rc1"


def test_cann_facts_fails_on_a_file_it_cannot_read(tmp_path: Path) -> None:
    base = tmp_path / "Ascend"
    _put(base / "nnal/atb/8.5.0/version.info", "version=8.5.0\n")
    (base / "nnal/atb/latest").symlink_to("8.5.0")
    # the module imports the collection's copy of the module (one file, two import names)
    with pytest.raises(collection_files.AscendFileError,
                       match=r"nnal/atb/latest/version.info: line 1 'version=8.5.0'"):
        cann_facts.cann_state(str(base))


# --- the simulator writes what real installs have -----------------------------------------------


def _keys(reader: Reader, text: str) -> list[str]:
    return list(reader(text, "sample")["fields"])


@pytest.mark.parametrize(
    ("reader", "rendered", "sample", "version"),
    [
        (ascend_files.read_driver_info, installer.render_driver_info("25.5.0"),
         "driver-25.3.rc1-pypto-doc", "25.5.0"),
        (ascend_files.read_firmware_info, installer.render_firmware_info("7.8.0.2.212", "25.5.0"),
         "firmware-7.7.0.1.231", "7.8.0.2.212"),
        (ascend_files.read_toolkit_install_info,
         installer.render_toolkit_install_info("8.3.RC2", "aarch64", "/x/8.3.RC2/aarch64-linux"),
         "toolkit-install-info-8.3.RC2-aarch64", "8.3.RC2"),
        (ascend_files.read_component_version_info, installer.render_ops_info("8.2.RC1"),
         "opp-kernel-version-8.2.RC1", "8.2.RC1"),
        (ascend_files.read_component_version_info, installer.render_ops_info("8.5.0"),
         "opp-version-8.5.0.2.220-pypto-doc", "8.5.0"),
        (ascend_files.read_nnal_atb_info, installer.render_atb_info("8.5.0", "aarch64"),
         "nnal-atb-8.2.RC1.B150", "8.5.0"),
    ],
)  # fmt: skip
def test_simulator_files_have_the_structure_of_real_ones(
        reader: Reader, rendered: str, sample: str, version: str) -> None:
    assert reader(rendered, "sim")["version"] == version
    assert _keys(reader, rendered) == _keys(reader, _text(sample))
    indent = re.match(r"^\s*", _text(sample))
    assert rendered.startswith(indent.group(0) if indent and "nnal" in sample else "")


@pytest.mark.parametrize("cann", ["8.3.RC2", "8.5.0"])
def test_cann_facts_reads_what_the_simulator_installs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cann: str) -> None:
    monkeypatch.setenv("ASCEND_SIM_ROOT", str(tmp_path))
    monkeypatch.setenv("ASCEND_SIM_NODE", str(tmp_path / "no-node.json"))
    base = "/usr/local/Ascend"
    for kind in ("toolkit", "kernels", "nnal"):
        manifest = {"kind": kind, "version": cann, "chip": "910b", "arch": platform.machine(),
                    "package": kind, "filename": f"{kind}.run"}
        method = getattr(installer, f"install_{kind}")
        assert method(manifest, {"--install": True, "--quiet": True}) == 0
    state = cann_facts.cann_state(str(tmp_path) + base)
    root = installer.toolkit_root(str(tmp_path) + base, cann)
    assert state["toolkits"] == [{"version": cann, "root": root, "kernels_version": cann}]
    assert state["nnal_version"] == cann
    if cann == "8.3.RC2":
        latest = tmp_path / "usr/local/Ascend/ascend-toolkit/latest"
        assert latest.is_dir() and not latest.is_symlink()
