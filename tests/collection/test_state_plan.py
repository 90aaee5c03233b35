"""The plan filters (plugins/filter/state_plan.py) and file_state.differences: the "is there
anything to do?" comparisons the roles read as a verdict (issue 33), on states shaped as the
state modules return them. Each comparison: converged gives nothing to do, and each kind of
drift names what to do."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError  # type: ignore[import-untyped]

from ansible_collections.ascend_serve.fleet.plugins.filter.state_plan import (
    account_differs,
    content_plan,
    copy_plan,
    device_address_problems,
    limits_plan,
    state_plan,
    sysctl_plan,
    sysctl_report,
    unit_plan,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import (
    differences,
    file_state,
)

UNIT_TEXT = "[Unit]\nDescription=x\n"
KEY_TEXT = "VLLM_API_KEY=secret\n"


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - as the state read's


def _file(text: str, mode: str = "0644", owner: str = "root",
          group: str = "root") -> dict[str, Any]:
    return {"sha1": _sha1(text), "mode": mode, "owner": owner, "group": group, "isdir": False,
            "islnk": False}


def _dir(mode: str = "0755", owner: str = "root", group: str = "root") -> dict[str, Any]:
    return {"sha1": None, "mode": mode, "owner": owner, "group": group, "isdir": True,
            "islnk": False}


def _converged(code: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A state and a want that agree: the npu_metrics role's shape."""
    want = {
        "account": {"user": "m", "group": "m", "groups": ["video"], "shell": "/usr/sbin/nologin",
                    "home": "/var/lib/m"},
        "dirs": [{"path": "/opt/m", "owner": "root", "group": "root", "mode": "0755"},
                 {"path": "/textfile", "mode": "0755"}],
        "files": [{"path": "/opt/m/code.py", "src": str(code), "mode": "0644", "owner": "root",
                   "group": "root"},
                  {"path": "/etc/systemd/system/m.service", "content": UNIT_TEXT,
                   "mode": "0644", "owner": "root", "group": "root"}],
        "links": {"/textfile/m.prom": "/var/lib/m/m.prom"},
        "units": ["node-exporter.service", "m.timer"],
    }
    state = {
        "missing_packages": [],
        "user": {"exists": True, "group": "m", "groups": ["video", "render"],
                 "shell": "/usr/sbin/nologin", "home": "/var/lib/m"},
        "group": {"exists": True},
        "files": {"/opt/m": _dir(), "/textfile": _dir(owner="prometheus"),
                  "/opt/m/code.py": _file(code.read_text()),
                  "/etc/systemd/system/m.service": _file(UNIT_TEXT)},
        "links": {"/textfile/m.prom": "/var/lib/m/m.prom"},
        "units": {"node-exporter.service": {"active": True, "enabled": True},
                  "m.timer": {"active": True, "enabled": True}},
    }
    return state, want


@pytest.fixture
def code(tmp_path: Path) -> Path:
    path = tmp_path / "code.py"
    path.write_text("print('metrics')\n")
    return path


def test_a_converged_node_has_nothing_to_do(code: Path) -> None:
    state, want = _converged(code)
    assert state_plan(state, want) == []


@pytest.mark.parametrize(
    ("drift", "expected"),
    [
        (lambda s: s.update(missing_packages=["node-exporter", "x"]), "install node-exporter, x"),
        (lambda s: s["group"].update(exists=False), "account m"),
        (lambda s: s["user"].update(exists=False), "account m"),
        (lambda s: s["user"].update({"shell": "/bin/bash"}), "account m"),
        (lambda s: s["user"].update(home="/home/m"), "account m"),
        (lambda s: s["user"].update(group="users"), "account m"),
        (lambda s: s["user"].update(groups=["render"]), "account m"),
        (lambda s: s["files"].update({"/opt/m": None}), "directory /opt/m"),
        (lambda s: s["files"].update({"/opt/m": _dir(mode="0700")}), "directory /opt/m"),
        (lambda s: s["files"].update({"/opt/m": _dir(owner="m")}), "directory /opt/m"),
        (lambda s: s["files"].update({"/opt/m": _file("")}), "directory /opt/m"),
        (lambda s: s["files"].update({"/textfile": _dir(mode="0750")}), "directory /textfile"),
        (lambda s: s["files"].update({"/opt/m/code.py": _file("old\n")}), "file /opt/m/code.py"),
        (lambda s: s["files"].update({"/opt/m/code.py": None}), "file /opt/m/code.py"),
        (lambda s: s["files"].update({"/etc/systemd/system/m.service": _file(UNIT_TEXT,
                                                                             mode="0600")}),
         "file /etc/systemd/system/m.service"),
        (lambda s: s["files"].update({"/etc/systemd/system/m.service": _file(UNIT_TEXT,
                                                                             group="m")}),
         "file /etc/systemd/system/m.service"),
        (lambda s: s["files"].update({"/etc/systemd/system/m.service": _dir()}),
         "file /etc/systemd/system/m.service"),
        (lambda s: s["links"].update({"/textfile/m.prom": None}), "link /textfile/m.prom"),
        (lambda s: s["links"].update({"/textfile/m.prom": "/elsewhere"}),
         "link /textfile/m.prom"),
        (lambda s: s["units"]["m.timer"].update(active=False), "start and enable m.timer"),
        (lambda s: s["units"]["m.timer"].update(enabled=False), "start and enable m.timer"),
    ],
)
def test_each_drift_names_what_to_do(code: Path, drift: Any, expected: str) -> None:
    state, want = _converged(code)
    drift(state)
    assert state_plan(state, want) == [expected]


def test_the_plan_keeps_its_order(code: Path) -> None:
    state, want = _converged(code)
    state["missing_packages"] = ["node-exporter"]
    state["user"]["exists"] = False
    state["files"] = dict.fromkeys(state["files"])
    state["links"] = {}
    state["units"] = {}
    assert state_plan(state, want) == [
        "install node-exporter", "account m", "directory /opt/m", "directory /textfile",
        "file /opt/m/code.py", "file /etc/systemd/system/m.service", "link /textfile/m.prom",
        "start and enable node-exporter.service", "start and enable m.timer"]


def test_the_src_file_is_read_on_the_controller(code: Path) -> None:
    state, want = _converged(code)
    code.write_text("print('new')\n")
    assert state_plan(state, want) == ["file /opt/m/code.py"]
    code.unlink()
    with pytest.raises(AnsibleFilterError, match="cannot read"):
        state_plan(state, want)


def test_a_path_that_must_be_absent() -> None:
    state = {"files": {"/etc/vllm/api-key.env": _file(KEY_TEXT, mode="0600")}}
    assert state_plan(state, {"absent": ["/etc/vllm/api-key.env"]}) == [
        "remove /etc/vllm/api-key.env"]
    assert state_plan({"files": {"/etc/vllm/api-key.env": None}},
                      {"absent": ["/etc/vllm/api-key.env"]}) == []


def test_a_file_given_by_its_sha1_and_content_with_a_secret() -> None:
    state = {"files": {"/k": _file(KEY_TEXT, mode="0600")}}
    assert state_plan(state, {"files": [{"path": "/k", "content": KEY_TEXT, "mode": "0600"}]}) == []
    assert state_plan(state, {"files": [{"path": "/k", "sha1": _sha1(KEY_TEXT)}]}) == []
    changed = {"files": [{"path": "/k", "content": "VLLM_API_KEY=other\n", "mode": "0600"}]}
    assert state_plan(state, changed) == ["file /k"]


@pytest.mark.parametrize(
    ("image", "expected"),
    [({"engine": True, "present": True}, []),
     ({"engine": True, "present": False}, ["pull reg/vllm:1"]),
     ({"engine": False, "present": False}, ["install the container engine", "pull reg/vllm:1"])],
)
def test_the_image_a_container_runtime_needs(image: dict[str, bool], expected: list[str]) -> None:
    assert state_plan({"image": image}, {"image": "reg/vllm:1"}) == expected
    assert state_plan({"image": image}, {"image": ""}) == []  # not a container runtime


def test_an_unknown_want_key_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="unknown keys in want: filez"):
        state_plan({}, {"filez": []})
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        state_plan([], {})


def test_account_without_a_group_read() -> None:
    user = {"exists": True, "group": "g", "groups": [], "shell": "/bin/sh", "home": "/h"}
    assert not account_differs(user, None, {"user": "u", "group": "g"})
    assert account_differs(user, {"exists": False}, {"user": "u", "group": "g"})


def test_differences_of_a_path(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("x")
    seen = file_state(str(path))
    assert seen is not None
    assert differences(seen, {"directory": False, "sha1": _sha1("x"), "mode": seen["mode"],
                              "owner": seen["owner"], "group": seen["group"]}) == []
    assert differences(seen, {"mode": None, "owner": None}) == []  # left out: not compared
    assert differences(seen, {"sha1": _sha1("y")}) == [f"sha1 {_sha1('x')} (wanted {_sha1('y')})"]
    assert differences(seen, {"directory": True}) == ["not a directory"]
    assert differences(file_state(str(tmp_path)), {"directory": False}) == ["a directory"]
    assert differences(None, {}) == ["missing"]


RUNNING = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
           "NRestarts": "0", "UnitFileState": "enabled", "NeedDaemonReload": "no"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [({}, []),
     ({"ActiveState": "activating", "SubState": "start"}, []),
     ({"ActiveState": "inactive", "SubState": "dead"}, ["start and enable vllm"]),
     ({"UnitFileState": "disabled"}, ["start and enable vllm"]),
     ({"NeedDaemonReload": "yes"}, ["start and enable vllm"]),
     ({"ActiveState": "failed", "SubState": "failed"},
      ["reset-failed vllm", "start and enable vllm"]),
     ({"ActiveState": "activating", "SubState": "auto-restart"}, ["reset-failed vllm"]),
     ({"ActiveState": "inactive", "SubState": "dead", "NRestarts": "3"},
      ["reset-failed vllm", "start and enable vllm"]),
     ({"LoadState": "not-found", "ActiveState": "inactive", "UnitFileState": ""},
      ["start and enable vllm"])],
)
def test_unit_plan(change: dict[str, str], expected: list[str]) -> None:
    assert unit_plan({**RUNNING, **change}, "vllm") == expected


def test_unit_plan_of_a_unit_systemd_does_not_know() -> None:
    assert unit_plan({}, "vllm") == ["start and enable vllm"]


SYSCTL_STATE: dict[str, Any] = {
    "sysctl_file": {"vm.swappiness": "0", "net.ipv4.tcp_rmem": "4096 87380 6291456"},
    "sysctl": {"vm.swappiness": {"exists": True, "writable": True, "value": "0"},
               "net.ipv4.tcp_rmem": {"exists": True, "writable": False,
                                     "value": "4096 131072 6291456"},
               "kernel.gone": {"exists": False, "writable": False, "value": None}},
}


def test_sysctl_plan() -> None:
    wanted = {"vm.swappiness": 0, "net.ipv4.tcp_rmem": "4096 87380 6291456"}
    # Converged: the file's lines match; a running value that cannot be written is not compared.
    assert sysctl_plan(SYSCTL_STATE, wanted) == []
    state = copy.deepcopy(SYSCTL_STATE)
    state["sysctl"]["vm.swappiness"]["value"] = "60"
    assert sysctl_plan(state, wanted) == ["vm.swappiness"]
    state = copy.deepcopy(SYSCTL_STATE)
    state["sysctl_file"].pop("net.ipv4.tcp_rmem")
    assert sysctl_plan(state, wanted) == ["net.ipv4.tcp_rmem"]
    # Running values are compared with whitespace as sysctl prints it.
    state = copy.deepcopy(SYSCTL_STATE)
    state["sysctl"]["net.ipv4.tcp_rmem"].update(writable=True, value="4096 87380 6291456")
    assert sysctl_plan(state, {"net.ipv4.tcp_rmem": "4096  87380\t6291456"}) == [
        "net.ipv4.tcp_rmem"]  # the file's line differs (written as given)
    state["sysctl_file"]["net.ipv4.tcp_rmem"] = "4096  87380\t6291456"
    assert sysctl_plan(state, {"net.ipv4.tcp_rmem": "4096  87380\t6291456"}) == []


def test_sysctl_report() -> None:
    report = sysctl_report(SYSCTL_STATE, {"vm.swappiness": 0, "net.ipv4.tcp_rmem": "1 2 3",
                                          "kernel.gone": 1})
    assert report["vm.swappiness"] == {"value": "0", "applied": True, "reason": ""}
    assert not report["net.ipv4.tcp_rmem"]["applied"]
    assert report["net.ipv4.tcp_rmem"]["reason"] == (
        "/proc/sys/net/ipv4/tcp_rmem is not writable by this process (read-only /proc/sys, as in"
        " a container, or not root); running value 4096 131072 6291456")
    assert report["kernel.gone"] == {
        "value": "1", "applied": False,
        "reason": "this kernel has no /proc/sys/kernel/gone (the setting does not exist here)"}


def test_limits_plan() -> None:
    limits = [{"domain": "*", "limit_type": "-", "limit_item": "nofile", "value": 1048576},
              {"domain": "*", "limit_type": "-", "limit_item": "memlock", "value": "unlimited"}]
    seen = [["*", "-", "nofile", "1048576"]]
    assert limits_plan(seen, limits) == [limits[1]]
    assert limits_plan([*seen, ["*", "-", "memlock", "unlimited"]], limits) == []
    assert limits_plan([["*", "-", "nofile", "1024"]], limits[:1]) == limits[:1]


def test_device_address_problems() -> None:
    planned = [{"device": 0, "address": "10.0.0.1"}, {"device": 1, "address": "10.0.0.2"}]
    seen = [{"device": 0, "address": "10.0.0.1"}, {"device": 1, "address": "10.0.9.9"}]
    assert device_address_problems(seen, planned) == [
        "device 1: address 10.0.9.9, planned 10.0.0.2"]
    assert device_address_problems(seen[:1], planned) == [
        "device 1: address none, planned 10.0.0.2"]
    assert device_address_problems(seen[:1], planned[:1]) == []


def test_copy_plan_names_the_files_whose_copy_differs(tmp_path: Path) -> None:
    src, dest = tmp_path / "locks", tmp_path / "node"
    src.mkdir()
    dest.mkdir()
    names = ["plan.json", "a.txt", "b.txt", "c.txt"]
    for name in names:
        (src / name).write_text(f"{name}\n")
        (dest / name).write_text(f"{name}\n")
    (dest / "b.txt").write_text("older\n")
    (dest / "c.txt").unlink()
    owner = file_state(str(src / "a.txt"))
    assert owner is not None

    def state() -> dict[str, Any]:
        return {"files": {str(dest / n): file_state(str(dest / n)) for n in names}}

    for name in ("plan.json", "a.txt", "b.txt"):
        (dest / name).chmod(0o644)
    args = (str(src), str(dest), names, "0644", owner["owner"], owner["group"])
    assert copy_plan(state(), *args) == ["b.txt", "c.txt"]  # content, missing; in order
    (dest / "plan.json").chmod(0o600)
    assert copy_plan(state(), *args) == ["plan.json", "b.txt", "c.txt"]  # mode
    assert copy_plan(state(), str(src), str(dest), ["a.txt"], "0644", "nobody",
                     owner["group"]) == ["a.txt"]  # owner
    (dest / "plan.json").chmod(0o644)
    (dest / "b.txt").write_text("b.txt\n")
    (dest / "c.txt").write_text("c.txt\n")
    (dest / "c.txt").chmod(0o644)
    assert copy_plan(state(), *args) == []  # converged
    with pytest.raises(AnsibleFilterError):
        copy_plan(state(), str(src), str(dest), ["no-such-file"])


def test_content_plan_names_the_files_whose_text_differs(tmp_path: Path) -> None:
    suffix = "-1.0.dist-info/METADATA"
    contents = {"torch_npu": "Name: torch_npu\n", "vllm": "Name: vllm\n", "x": "Name: x\n"}
    for name, text in contents.items():
        (tmp_path / f"{name}{suffix.split('/')[0]}").mkdir()
        path = tmp_path / f"{name}{suffix}"
        path.write_text(text)
        path.chmod(0o644)
    (tmp_path / f"vllm{suffix}").write_text("Name: vllm-old\n")
    files = {f"{name}{suffix}": file_state(str(tmp_path / f"{name}{suffix}"))
             for name in contents}
    files["x" + suffix] = None  # missing
    mine = file_state(str(tmp_path / f"torch_npu{suffix}"))
    assert mine is not None
    args = (suffix, "0644", mine["owner"], mine["group"])
    assert content_plan(files, contents, *args) == ["vllm", "x"]
    assert content_plan(files, {"torch_npu": contents["torch_npu"]}, *args) == []
    assert content_plan(files, {"torch_npu": contents["torch_npu"]}, suffix, "0600",
                        mine["owner"], mine["group"]) == ["torch_npu"]  # mode
