#!/usr/bin/python
"""Read, in one round trip, everything the vllm_service role decides from."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_service_state
short_description: Read the vLLM unit's state, its files, its user and its inputs in one round trip
description:
  - The one remote read of the C(ascend_serve.fleet.vllm_service) role. It returns the systemd
    unit's properties (C(systemctl show), so loaded, active, enabled, restarts, whether systemd
    must reload it), the state of the files the role writes (sha1, mode, owner, group), whether
    the service user and group exist with their groups, shell and home, which of the paths the
    unit needs exist, and the model's C(config.json).
  - The role compares this with what it wants (rendering its templates on the controller) and
    runs only the tasks that change something; the server's checks run after a change.
options:
  unit:
    description: The systemd unit, without C(.service).
    type: str
    required: true
  files:
    description: Files and directories whose state (sha1, mode, owner, group) is returned.
    type: list
    elements: path
    default: []
  paths:
    description: Paths whose existence is returned.
    type: list
    elements: path
    default: []
  json_file:
    description: A JSON file whose content is returned (the model's C(config.json)).
    type: path
  user:
    description: The service user.
    type: str
  group:
    description: The service group.
    type: str
  groups:
    description: Groups whose IDs are returned (the service user's supplementary groups).
    type: list
    elements: str
    default: []
    version_added: 0.6.0
  image:
    description:
      - A container image reference; its local state is returned in RV(image).
      - Nothing is pulled.
    type: str
    version_added: 0.6.0
  engine:
    description: The container engine that holds O(image).
    type: str
    default: podman
    version_added: 0.6.0
version_added: 0.4.0
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
"""

EXAMPLES = r"""
- name: Read the vLLM unit, its files and its inputs
  ascend_serve.fleet.vllm_service_state:
    unit: ascend-vllm
    files: [/etc/ascend-serve/vllm/launch.sh, /etc/systemd/system/ascend-vllm.service]
    paths: [/opt/ascend-serve/env/bin/vllm]
    json_file: /var/lib/ascend-serve/models/tiny-deepseek-v3/config.json
    user: ascend-vllm
    group: ascend-vllm
  register: _vllm_service_state
"""

RETURN = r"""
unit:
  description:
    - The unit's properties as C(systemctl show) gives them (C(LoadState), C(ActiveState),
      C(SubState), C(Result), C(NRestarts), C(UnitFileState), C(NeedDaemonReload)); empty
      where systemctl cannot be asked.
  returned: always
  type: dict
  sample: {LoadState: loaded, ActiveState: active, SubState: running, Result: success,
           NRestarts: "0", UnitFileState: enabled, NeedDaemonReload: "no"}
files:
  description:
    - State of each of O(files), by path; null for a path that does not exist.
    - Its C(sha1) (null for a directory), C(mode) (such as C(0644)), C(owner), C(group),
      C(isdir) and C(islnk).
  returned: always
  type: dict
paths:
  description: Whether each of O(paths) exists, by path.
  returned: always
  type: dict
json:
  description: The content of O(json_file); null when it is missing or not JSON.
  returned: always
  type: raw
json_error:
  description: Why O(json_file) could not be parsed; empty when it was, or is missing.
  returned: always
  type: str
user:
  description: The service user (O(user)); C(exists) false when there is none.
  returned: always
  type: dict
  sample: {exists: true, uid: 998, gid: 998, group: ascend-vllm, groups: [HwHiAiUser],
           shell: /usr/sbin/nologin, home: /var/lib/ascend-serve/vllm}
group:
  description: The service group (O(group)); C(exists) false when there is none.
  returned: always
  type: dict
  sample: {exists: true, gid: 998}
group_ids:
  description: The ID of each of O(groups), by name; null for a group that does not exist.
  returned: always
  type: dict
  sample: {HwHiAiUser: 1000}
image:
  description:
    - The local state of O(image) (empty without it). C(engine) false when the engine is not
      installed; C(present) whether the image is in its store, with its C(id) and
      C(repo_digests) when it is.
  returned: always
  type: dict
  sample: {engine: true, present: true, id: "sha256:3f1c...",
           repo_digests: ["registry.example:5000/ascend/vllm-ascend@sha256:9a2b..."]}
"""

import grp
import json
import os
import subprocess
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.account_state import (
    group_state,
    user_state,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main

PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "NRestarts", "UnitFileState",
              "NeedDaemonReload")


def unit_state(module: Any, unit: str) -> dict[str, str]:
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return {}
    argv = [systemctl, "show", f"{unit}.service"]
    for prop in PROPERTIES:
        argv += ["--property", prop]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    if done.returncode != 0:
        return {}
    props = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {key: props[key] for key in PROPERTIES if key in props}


def read_json(path: str | None) -> tuple[Any, str]:
    """(content, "") of a JSON file; (None, "") when it is missing, (None, why) when it is not
    JSON or cannot be read."""
    if not path or not os.path.exists(path):
        return None, ""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh), ""
    except (OSError, ValueError) as exc:
        return None, f"{path}: {exc}"


def group_ids(names: list[str]) -> dict[str, int | None]:
    found: dict[str, int | None] = {}
    for name in names:
        try:
            found[name] = grp.getgrnam(name).gr_gid
        except KeyError:
            found[name] = None
    return found


def image_state(module: Any, engine: str, image: str | None) -> dict[str, Any]:
    """What the container engine holds of ``image`` (read only: nothing is pulled)."""
    if not image:
        return {}
    path = module.get_bin_path(engine)
    if not path:
        return {"engine": False, "present": False}
    try:
        done = subprocess.run([path, "image", "inspect", image],
                              capture_output=True, text=True, check=False, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"{engine} image inspect {image} failed: {exc}")
    if done.returncode != 0:  # podman: "no such image" (exit 125)
        return {"engine": True, "present": False}
    try:
        found = json.loads(done.stdout)[0]
    except (ValueError, IndexError, KeyError) as exc:
        module.fail_json(msg=f"{engine} image inspect {image}: unreadable output ({exc})")
    return {"engine": True, "present": True, "id": found.get("Id", ""),
            "repo_digests": found.get("RepoDigests") or []}


def run(module: Any) -> dict[str, Any]:
    params = module.params
    content, error = read_json(params["json_file"])
    return {
        "changed": False,
        "unit": unit_state(module, params["unit"]),
        "files": {path: file_state(path) for path in params["files"]},
        "paths": {path: os.path.exists(path) for path in params["paths"]},
        "json": content,
        "json_error": error,
        "user": user_state(params["user"]),
        "group": group_state(params["group"]),
        "group_ids": group_ids(params["groups"]),
        "image": image_state(module, params["engine"], params["image"]),
    }


def main() -> None:
    result_main(
        {
            "unit": {"type": "str", "required": True},
            "files": {"type": "list", "elements": "path", "default": []},
            "paths": {"type": "list", "elements": "path", "default": []},
            "json_file": {"type": "path"},
            "user": {"type": "str"},
            "group": {"type": "str"},
            "groups": {"type": "list", "elements": "str", "default": []},
            "image": {"type": "str"},
            "engine": {"type": "str", "default": "podman"},
        },
        run,
    )


if __name__ == "__main__":
    main()
