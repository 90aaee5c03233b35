#!/usr/bin/python
"""Write a role's local facts file (its ledger entry), checked against the ledger schema."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ledger
short_description: Write a role's local facts file, checked against the ledger schema
description:
  - The one way the collection's roles record what they did in
    C(/etc/ansible/facts.d/<name>.fact), read back by Ansible as C(ansible_local.<name>) and by
    C(ascend-serve fleet status) and C(ascend-serve doctor).
  - The record is checked against the schema in the collection's C(module_utils/ledger.py)
    (documented in C(docs/ledger.md)) before anything is written; a record with a missing
    required key, a key the schema does not know, a value of the wrong type or a value outside
    the allowed choices is refused, listing every problem. The ledger I(name) must be the one
    the schema gives to I(role).
  - The file is written as sorted, indented JSON (the text of C(to_nice_json(indent=2))), through
    a temporary file renamed over the old one, with mode 0644 (0600 for a ledger the schema
    marks secret), owned by root when run as root. It is rewritten only when its JSON differs
    (a file in another layout with the same content is left alone); the directory is created
    (0755) when missing.
  - Notify the handler topic C(ascend_serve ledger changed) (role C(ascend_serve.fleet.ledger))
    so that C(ansible_local) is read again.
version_added: 0.3.0
options:
  name:
    description: The ledger (file name without C(.fact)), e.g. C(ascend_swap).
    type: str
    required: true
  role:
    description: The role writing it; must be the ledger's writer in the schema.
    type: str
    required: true
  record:
    description: The whole record, as the schema describes it.
    type: dict
    required: true
  facts_dir:
    description: Directory of the local facts files (Ansible's C(fact_path)).
    type: path
    default: /etc/ansible/facts.d
attributes:
  check_mode:
    support: full
    details: Nothing is written; C(changed) says whether the file would be.
  diff_mode:
    support: full
    details: The file's text before (empty when there is none) and after.
extends_documentation_fragment:
  - ascend_serve.fleet.common
"""

EXAMPLES = r"""
- name: Record the swap state in the ledger
  ascend_serve.fleet.ledger:
    name: ascend_swap
    role: swap
    record:
      size_gb: 2
      file: /swapfile
      priority: 10
      active: true
  notify: ascend_serve ledger changed
"""

RETURN = r"""
path:
  description: The file written (or that would be).
  returned: always
  type: str
  sample: /etc/ansible/facts.d/ascend_swap.fact
record:
  description: The record, as written.
  returned: always
  type: dict
  sample: {size_gb: 2, file: /swapfile, priority: 10, active: true}
schema_version:
  description: Version of the ledger schema the record was checked against.
  returned: always
  type: int
  sample: 1
diff:
  description: The file's text before (empty when it did not exist) and after.
  returned: when diff mode is on
  type: dict
  sample: {before: "", after: "{\n  \"active\": true\n}\n",
           before_header: /etc/ansible/facts.d/ascend_swap.fact,
           after_header: /etc/ansible/facts.d/ascend_swap.fact}
"""

import json
import os
import stat
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ledger import (
    FACTS_DIR,
    LEDGERS,
    SCHEMA_VERSION,
    LedgerError,
    canonical,
    dumps,
    fact_path,
    validate,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main


def _read(path: str) -> tuple[str | None, Any]:
    """(text, parsed JSON or None) of the current file; (None, None) where there is none."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None, None
    try:
        return text, json.loads(text)
    except ValueError:
        return text, None  # a damaged file is rewritten


def _write(module: AnsibleModule, directory: str, path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def run(module: AnsibleModule) -> dict[str, Any]:
    """The module's work; raises LedgerError (before anything is written) for a bad record."""
    params = module.params
    name, record = params["name"], params["record"]
    validate(name, params["role"], record)
    directory = params["facts_dir"] or FACTS_DIR
    path = fact_path(name, directory)
    mode = 0o600 if LEDGERS[name].get("secret") else 0o644
    as_root = os.geteuid() == 0

    text = dumps(record)
    before_text, before = _read(path)
    content_changed = before is None or canonical(before) != canonical(record)
    attrs_changed = False
    if before_text is not None:
        st = os.stat(path)
        attrs_changed = stat.S_IMODE(st.st_mode) != mode or (
            as_root and (st.st_uid, st.st_gid) != (0, 0))
    changed = content_changed or attrs_changed

    if changed and not module.check_mode:
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        if content_changed:
            _write(module, directory, path, text)
        os.chmod(path, mode)
        if as_root:
            os.chown(path, 0, 0)

    shown_before = "" if before_text is None else (dumps(before) if before is not None
                                                    else before_text)
    return {
        "changed": changed,
        "path": path,
        "record": record,
        "schema_version": SCHEMA_VERSION,
        "diff": {"before": shown_before, "after": text,
                 "before_header": path, "after_header": path},
    }


def main() -> None:
    result_main(
        {
            "name": {"type": "str", "required": True},
            "role": {"type": "str", "required": True},
            "record": {"type": "dict", "required": True},
            "facts_dir": {"type": "path", "default": FACTS_DIR},
        },
        run,
        (LedgerError,),
    )


if __name__ == "__main__":
    main()
