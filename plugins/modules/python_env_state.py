#!/usr/bin/python
"""Read, in one round trip, what the python_env role manages, so that it can decide its plan."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: python_env_state
short_description: Read the serving Python environment's state in one round trip
description:
  - The one remote read of the C(ascend_serve.fleet.python_env) role on a converged host. It
    reads the system Python's version, whether Miniconda and the OS packages are installed
    (from the package database; apt or dnf is not started), the environment's Python version,
    its site-packages and the installed versions of some distributions (one run of the
    environment's interpreter, which imports nothing of the set), the role's files in the
    environment (sha1, mode, owner) and its install marker.
  - The role compares this with what it wants on the controller and runs its apply tasks (pip
    among them) and its import check only when something differs.
version_added: 0.4.0
options:
  prefix:
    description: The environment's root (its interpreter is C(PREFIX/bin/python)).
    type: path
    required: true
  python:
    description: A system interpreter whose major.minor version is reported (a venv's base).
    type: path
  conda_prefix:
    description: Where Miniconda is installed; reports whether C(bin/conda) exists there.
    type: path
  distributions:
    description: Distributions whose installed version in the environment is reported.
    type: list
    elements: str
    default: []
  files:
    description: Files whose state (sha1, mode, owner, group) is reported.
    type: list
    elements: path
    default: []
  directories:
    description: Directories whose regular files (not those below) are reported as O(files) are.
    type: list
    elements: path
    default: []
  purelib_files:
    description: Files under the environment's site-packages (relative paths) to report.
    type: list
    elements: str
    default: []
  marker:
    description: A JSON file whose content is returned (the role's install marker).
    type: path
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
  - ascend_serve.fleet.common.packages
"""

EXAMPLES = r"""
- name: Read the environment's state
  ascend_serve.fleet.python_env_state:
    prefix: /opt/ascend-serve/env
    python: /usr/bin/python3
    packages: [python3, python3-venv, python3-pip]
    distributions: [torchvision, triton]
    directories: [/opt/ascend-serve/env/ascend-serve/lock]
    purelib_files: [vllm-0.32.0+cpu.dist-info/METADATA]
    marker: /opt/ascend-serve/env/ascend-serve/installed.json
  register: _python_env_state
"""

RETURN = r"""
python_version:
  description: Major.minor of O(python); null without O(python) or when it does not run.
  returned: always
  type: str
  sample: "3.11"
conda:
  description: Whether C(CONDA_PREFIX/bin/conda) exists (false without O(conda_prefix)).
  returned: always
  type: bool
missing_packages:
  description: The packages of O(packages) that are not installed, in their order.
  returned: always
  type: list
  elements: str
env:
  description: The environment.
  returned: always
  type: dict
  contains:
    exists:
      description: Whether C(PREFIX/bin/python) exists.
      type: bool
    python:
      description: Its version (X.Y.Z); null when it does not exist or does not run.
      type: str
      sample: "3.11.2"
    error:
      description: Why it did not run (empty when it ran or does not exist).
      type: str
    purelib:
      description: Its site-packages directory; null when it did not run.
      type: str
    distributions:
      description: Installed version of each of O(distributions); null for one not installed.
      type: dict
    files:
      description: State of each of O(purelib_files), by the relative path given.
      type: dict
files:
  description:
    - State of each of O(files) and of each regular file in O(directories), by path.
    - Null for a path that does not exist, else its C(sha1) (null for a directory), C(mode)
      (such as C(0644)), C(owner), C(group), C(isdir) and C(islnk).
  returned: always
  type: dict
marker:
  description: The content of O(marker); null when it is missing or not JSON.
  returned: always
  type: dict
"""

from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main
from ansible_collections.ascend_serve.fleet.plugins.module_utils.python_env_read import (
    ARGUMENT_SPEC,
    ERRORS,
    read,
)


def main() -> None:
    result_main(ARGUMENT_SPEC, read, errors=ERRORS)


if __name__ == "__main__":
    main()
