"""cann_facts as Ansible runs it: besides the versions, the environment the set_env.sh scripts
export (sourced in order in a clean shell, as the cann role's profile script gives it to a login
shell) and the state of the files the role writes, so that a converged host is read in one call.
"""

from __future__ import annotations

import grp
import hashlib
import importlib
import pwd
from pathlib import Path
from typing import Any

import pytest
from ansible_run import module_result

cann_facts = importlib.import_module(
    "ansible_collections.ascend_serve.fleet.plugins.modules.cann_facts")

# What the vendor's scripts do, reduced (sim/ascend_sim/devtools/installer.py writes the same):
# the toolkit's exports its home and prepends its libraries, ATB's prepends its own after it.
TOOLKIT_ENV = """\
# Ascend CANN toolkit environment
export ASCEND_TOOLKIT_HOME={root}
export LD_LIBRARY_PATH={root}/lib64:${{LD_LIBRARY_PATH:-}}
export MULTI_LINE="first
second"
NOT_EXPORTED=1
"""
ATB_ENV = """\
# Ascend NNAL (ATB) environment
export ATB_HOME_PATH={atb}
export LD_LIBRARY_PATH={atb}/lib:${{LD_LIBRARY_PATH:-}}
"""


def _scripts(tmp_path: Path) -> list[str]:
    root, atb = tmp_path / "Ascend/cann-8.5.0", tmp_path / "Ascend/nnal/atb"
    root.mkdir(parents=True)
    atb.mkdir(parents=True)
    (root / "set_env.sh").write_text(TOOLKIT_ENV.format(root=root))
    (atb / "set_env.sh").write_text(ATB_ENV.format(atb=atb / "latest"))
    return [str(root / "set_env.sh"), str(atb / "set_env.sh")]


def _state(tmp_path: Path, **args: Any) -> dict[str, Any]:
    result = module_result("cann_facts", {"install_path": str(tmp_path / "Ascend"), **args},
                           tmp_path, check_mode=True, env={"LEAKED_FROM_CALLER": "yes"})
    assert (result.get("failed"), result["changed"]) == (None, False), result
    state: dict[str, Any] = result["ansible_facts"]["ascend_cann_state"]
    return state


def test_the_environment_of_the_scripts_in_order_in_a_clean_shell(tmp_path: Path) -> None:
    scripts = _scripts(tmp_path)
    env = _state(tmp_path, set_env=scripts)["environment"]
    atb = tmp_path / "Ascend/nnal/atb/latest"
    root = tmp_path / "Ascend/cann-8.5.0"
    assert env["ASCEND_TOOLKIT_HOME"] == str(root)
    assert env["ATB_HOME_PATH"] == str(atb)
    # ATB's script ran second, on what the toolkit's exported.
    assert env["LD_LIBRARY_PATH"] == f"{atb}/lib:{root}/lib64:"
    assert env["PATH"] == cann_facts.CLEAN_PATH
    # Nothing of the caller's environment, nothing unexported, no multi-line value.
    assert not {"LEAKED_FROM_CALLER", "NOT_EXPORTED", "MULTI_LINE", "HOME"} & set(env), env


def test_without_scripts_no_environment_is_read(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert (state["environment"], state["environment_error"], state["files"]) == ({}, "", {})


def test_a_missing_script_is_named_and_nothing_is_sourced(tmp_path: Path) -> None:
    toolkit, _ = _scripts(tmp_path)
    missing = str(tmp_path / "Ascend/nnal/atb/none/set_env.sh")
    state = _state(tmp_path, set_env=[toolkit, missing])
    assert state["environment"] == {}
    assert state["environment_error"] == f"not found: {missing}"


def test_a_failing_script_is_reported_with_its_status_and_error(tmp_path: Path) -> None:
    toolkit, atb = _scripts(tmp_path)
    Path(atb).write_text("echo 'ATB: unsupported cxx_abi' >&2\nreturn 3\n")
    state = _state(tmp_path, set_env=[toolkit, atb])
    assert state["environment"] == {}
    assert state["environment_error"] == (
        f"sourcing {toolkit}, {atb} exited 3: ATB: unsupported cxx_abi")


def test_files_are_reported_by_path(tmp_path: Path) -> None:
    env_file = tmp_path / "etc/ascend-serve/cann.env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text("ASCEND_TOOLKIT_HOME=/usr/local/Ascend/cann-8.5.0\n")
    env_file.chmod(0o640)
    profile = tmp_path / "etc/profile.d/ascend-cann.sh"
    files = [str(env_file), str(env_file.parent), str(profile)]
    state = _state(tmp_path, files=files)["files"]
    st = env_file.stat()
    assert state[str(env_file)] == {
        "sha1": hashlib.sha1(env_file.read_bytes()).hexdigest(),  # noqa: S324
        "mode": "0640", "owner": pwd.getpwuid(st.st_uid).pw_name,
        "group": grp.getgrgid(st.st_gid).gr_name, "isdir": False, "islnk": False,
    }
    assert state[str(env_file.parent)]["isdir"] is True
    assert state[str(env_file.parent)]["sha1"] is None
    assert state[str(profile)] is None


@pytest.mark.parametrize(
    ("scripts", "expected"),
    [([], "env -0"), (["/a b/set_env.sh"], ". '/a b/set_env.sh' && env -0"),
     (["/t/set_env.sh", "/n/set_env.sh"], ". /t/set_env.sh\n. /n/set_env.sh && env -0")],
)
def test_the_script_sources_as_the_profile_script_does(scripts: list[str], expected: str) -> None:
    """One ``.`` a line, the environment printed when the last one succeeded: the status the
    profile script (sourced with ``&& env`` before) has."""
    assert cann_facts.resolve_script(scripts) == expected


def test_env_output_is_parsed_by_name() -> None:
    out = b"A=1\0B_2=x=y\0BASH_FUNC_f%%=() {  :\n}\0C=two\nlines\0=empty\0"
    assert cann_facts.parse_environment(out) == {"A": "1", "B_2": "x=y"}
