#!/usr/bin/python
"""Stage model weights described by a manifest: resumable, verified, atomic per file."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_stage
short_description: Stage model weights from a manifest, verified by size and sha256
description:
  - Compares a model directory with a manifest (files with sizes and sha256). A file counts as
    present when its size matches and the ledger records the same size, mtime and the
    manifest's sha256 for it, so a re-run on a staged model hashes nothing. A file with a
    matching size but no ledger entry (or I(verify=full)) is hashed once and recorded.
  - Before writing anything, checks that the filesystem has room for what is still to fetch
    (less what partial files already hold) plus I(min_free_bytes), and fails with the numbers.
  - Fetches each missing or damaged file into a staging directory next to the model directory
    (with I(source_kind=http), HTTP Range requests resume a partial file; with
    I(source_kind=path), a directory on the host such as an NFS mount, resumed by offset; with
    I(source_kind=staged), the files were already copied into the staging directory, e.g. from
    the controller). The
    partial file is renamed into the model directory only after its size and sha256 match;
    a mismatch deletes it and fails, naming the file, the expected and the found digest.
  - The model directory therefore only ever holds complete, verified files. The ledger's
    C(complete) flag is cleared before the first change and set when every file is verified;
    the manifest is written into the model directory as C(ascend-serve-manifest.json) then.
  - With I(plan_only=true) (and in check mode) nothing is changed; the plan is returned.
  - With I(p2p) (and I(source_kind=http)), the files still to fetch come first from a BitTorrent
    swarm run by libtorrent (imported by this interpreter or by I(p2p.python)), made of the
    other nodes named in I(p2p.peers) and the mirror as a web seed. The torrent is the one made
    for this manifest's digest on the mirror (C(ascend-serve model torrent)). Every file the swarm
    completes is still checked against the manifest's sha256 before it moves in; what the swarm
    does not complete (no peer and no web seed reachable, nothing arriving for
    I(p2p.stall_seconds)) is fetched from the mirror over HTTP. Seeding ends before the module
    returns.
  - With I(p2p), before anything changes, a host without an address in I(p2p.network) or with
    I(p2p.port) in use on that address is refused.
version_added: 0.2.0
options:
  manifest:
    description: The manifest (C(name), C(files) with C(path), C(size), C(sha256)).
    type: dict
    required: true
  dest:
    description: The model directory.
    type: path
    required: true
  staging_dir:
    description: Where partial files are kept (same filesystem as I(dest) for an atomic rename).
    type: path
    required: true
  source_kind:
    description: Where the files come from.
    type: str
    choices: [http, path, staged]
    default: staged
  source:
    description: Base URL (http) or directory (path) holding the files under their manifest paths.
    type: str
    default: ""
  verify:
    description:
      - C(fast) trusts ledger entries whose size and mtime match; C(full) re-hashes every file.
    type: str
    choices: [fast, full]
    default: fast
  plan_only:
    description: Only report what would be done.
    type: bool
    default: false
  min_free_bytes:
    description: Space that must stay free on the filesystem after staging.
    type: int
    default: 0
  owner:
    description: Owner of the model directory and its files.
    type: str
  group:
    description: Group of the model directory and its files.
    type: str
  headers:
    description: Extra HTTP headers (e.g. an authorization token for the mirror).
    type: dict
    default: {}
  timeout:
    description: Seconds to wait on the HTTP server per read.
    type: int
    default: 60
  validate_certs:
    description: Verify the HTTPS server's certificate.
    type: bool
    default: true
  p2p:
    description:
      - Peer-to-peer staging (opt-in); omitted, the files come from I(source) alone.
    type: dict
    version_added: 0.5.0
    suboptions:
      network:
        description: The IPv4 network (CIDR) of the peer traffic; the host's address in it is bound.
        type: str
        required: true
      port:
        description: The TCP port the swarm listens on, on that address.
        type: int
        default: 6881
      peers:
        description: The other nodes, as C(address:port) on the peer network.
        type: list
        elements: str
        default: []
      upload_rate:
        description: Upload cap in bytes per second (0 is no cap).
        type: int
        default: 0
      seed_seconds:
        description:
          - Seconds this node keeps seeding after its download completes (it stops earlier when
            every connected peer is complete). It always stops before the module returns.
        type: int
        default: 30
      stall_seconds:
        description: Seconds without progress after which the swarm is left and HTTP takes over.
        type: int
        default: 60
      web_seed:
        description: Use the mirror as a web seed inside the swarm.
        type: bool
        default: true
      python:
        description:
          - An interpreter on the host that imports libtorrent (for example the serving
            environment's) to run the swarm in; empty, the module's own interpreter.
        type: str
        default: ""
attributes:
  check_mode:
    support: full
    details: As with O(plan_only=true), nothing is changed and the plan is returned.
  diff_mode:
    support: none
extends_documentation_fragment:
  - ascend_serve.fleet.common
"""

EXAMPLES = r"""
- name: Stage DeepSeek-R1 W8A8 from the site's HTTP mirror
  ascend_serve.fleet.model_stage:
    manifest: "{{ lookup('ansible.builtin.file', 'manifests/deepseek-r1-w8a8.json') | from_json }}"
    dest: /var/lib/ascend-serve/models/deepseek-r1-w8a8
    staging_dir: /var/lib/ascend-serve/models/.deepseek-r1-w8a8.staging
    source_kind: http
    source: https://mirror.example.internal/models/deepseek-r1-w8a8
    owner: ascend-serve
    group: ascend-serve
"""

RETURN = r"""
plan:
  description: Files still to fetch, with the reason and the bytes a partial file already holds.
  returned: always
  type: list
  elements: dict
fetched:
  description: Files fetched (or finalised from the staging directory) by this run.
  returned: always
  type: list
  elements: str
hashed:
  description: Files whose sha256 this run computed (empty on a fast re-run of a staged model).
  returned: always
  type: list
  elements: str
bytes_to_fetch:
  description: Bytes still to transfer before this run.
  returned: always
  type: int
free_bytes:
  description: Free bytes on the model directory's filesystem before this run.
  returned: always
  type: int
complete:
  description: Whether every file of the manifest is present and verified after this run.
  returned: always
  type: bool
converged:
  description:
    - Whether the model directory needed nothing before this run (no file to fetch, the ledger
      and the manifest in the directory up to date); with O(plan_only=true), whether a run
      would change nothing.
  returned: always
  type: bool
  version_added: 0.4.0
p2p:
  description:
    - With O(p2p), what the swarm did (C(state), C(complete), C(bytes_downloaded),
      C(bytes_uploaded), C(peers_seen), C(peers_complete)), the bound C(address), the
      C(fallback) reason when HTTP fetched files; empty without O(p2p).
  returned: always
  type: dict
  version_added: 0.5.0
owned:
  description:
    - Whether the model directory and everything in it belong to O(owner) and O(group) (links
      not followed); false when one of them does not exist, null when neither is given.
  returned: always
  type: bool
  version_added: 0.4.0
"""

import errno
import grp
import hashlib
import json
import os
import pwd
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.ascend_serve.fleet.plugins.module_utils.model_p2p import (
    P2PError,
    address_in_network,
    check_engine,
    manifest_digest,
    port_in_use,
    run_swarm,
    run_swarm_with,
    torrent_file_name,
    web_seed_url,
)

CHUNK = 1 << 20
LEDGER = ".ascend-serve-ledger.json"
MANIFEST = "ascend-serve-manifest.json"


class StageError(Exception):
    pass


def _gib(value):
    if value < (1 << 30):
        return "%.1f MiB" % (value / float(1 << 20))
    return "%.2f GiB" % (value / float(1 << 30))


def _nearest_dir(path):
    existing = os.path.abspath(path)
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    return existing


def _free_bytes(path):
    st = os.statvfs(_nearest_dir(path))
    return st.f_bavail * st.f_frsize


def _sha256(path, start_hash=None, offset=0):
    digest = start_hash or hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(offset)
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest


def _safe_relpath(rel):
    norm = os.path.normpath(rel)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../") or norm.startswith("."):
        raise StageError(f"manifest path {rel!r} leaves the model directory or is hidden")
    return norm


def load_ledger(dest):
    try:
        with open(os.path.join(dest, LEDGER)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {"complete": False, "files": {}}
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        return {"complete": False, "files": {}}
    return data


def save_ledger(dest, ledger):
    path = os.path.join(dest, LEDGER)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(ledger, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def plan_files(files, dest, staging_dir, ledger, verify, hashed):
    """Return (todo, verified_entries): files to fetch and fresh ledger entries for good files."""
    todo = []
    fresh = {}
    for entry in files:
        rel = entry["path"]
        target = os.path.join(dest, rel)
        partial = os.path.join(staging_dir, rel + ".partial")
        partial_bytes = os.path.getsize(partial) if os.path.isfile(partial) else 0
        if not os.path.isfile(target):
            todo.append(dict(entry, reason="missing", partial_bytes=partial_bytes))
            continue
        st = os.stat(target)
        if st.st_size != entry["size"]:
            todo.append(dict(entry, reason=f"size {st.st_size}, manifest {entry['size']}",
                             partial_bytes=partial_bytes))
            continue
        record = ledger["files"].get(rel)
        known = (
            isinstance(record, dict)
            and record.get("size") == st.st_size
            and record.get("mtime_ns") == st.st_mtime_ns
            and record.get("sha256") == entry["sha256"]
        )
        if known and verify == "fast":
            continue
        hashed.append(rel)
        found = _sha256(target).hexdigest()
        if found != entry["sha256"]:
            todo.append(dict(entry, reason="sha256 {}, manifest {}".format(found, entry["sha256"]),
                             partial_bytes=partial_bytes))
            continue
        if not known:
            fresh[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": found}
    return todo, fresh


def _chown(path, uid, gid):
    if uid != -1 or gid != -1:
        os.chown(path, uid, gid)


def _makedirs(path, uid, gid):
    missing = []
    probe = path
    while not os.path.isdir(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    for directory in reversed(missing):
        os.mkdir(directory, 0o755)
        _chown(directory, uid, gid)


def fetch_http(module, url, partial, size):
    """Download url into partial, resuming with a Range request; returns the running sha256."""
    have = os.path.getsize(partial) if os.path.isfile(partial) else 0
    if have > size:
        os.unlink(partial)
        have = 0
    digest = _sha256(partial) if have else hashlib.sha256()
    if have == size:
        return digest
    headers = dict(module.params["headers"])
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = open_url(url, headers=headers, timeout=module.params["timeout"],
                            validate_certs=module.params["validate_certs"])
    except Exception as exc:  # urllib raises several types; each is a failed fetch
        raise StageError(f"cannot fetch {url}: {exc}") from exc
    status = getattr(response, "status", None) or response.getcode()
    mode = "ab"
    if have and status != 206:  # the server ignored the Range header: start over
        digest = hashlib.sha256()
        mode = "wb"
    with open(partial, mode) as handle:
        try:
            for block in iter(lambda: response.read(CHUNK), b""):
                digest.update(block)
                handle.write(block)
        except Exception as exc:  # a dropped connection: keep what arrived, resume next run
            handle.flush()
            raise StageError(
                f"the transfer of {url} broke off after {handle.tell()} of {size} bytes ({exc}); "
                "the partial file is kept and the next run resumes it"
            ) from exc
        handle.flush()
        os.fsync(handle.fileno())
    return digest


def fetch_path(source_file, partial, size):
    """Copy from a mounted path (e.g. NFS) into partial, resuming at its current length."""
    if not os.path.isfile(source_file):
        raise StageError(f"{source_file} does not exist on the host")
    have = os.path.getsize(partial) if os.path.isfile(partial) else 0
    if have > size:
        os.unlink(partial)
        have = 0
    digest = _sha256(partial) if have else hashlib.sha256()
    with open(source_file, "rb") as src, open(partial, "ab") as out:
        src.seek(have)
        for block in iter(lambda: src.read(CHUNK), b""):
            digest.update(block)
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    return digest


def _finish(partial, target, uid, gid, found):
    _makedirs(os.path.dirname(target), uid, gid)
    os.chmod(partial, 0o644)
    _chown(partial, uid, gid)
    os.replace(partial, target)
    st = os.stat(target)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": found}


def stage_file(module, entry, dest, staging_dir, uid, gid, swarm_file=None):
    """Fetch one file, verify it against the manifest and move it in. A file the swarm
    completed (swarm_file) is verified first; a mismatch discards it and HTTP fetches the file."""
    rel = entry["path"]
    target = os.path.join(dest, rel)
    if swarm_file and os.path.isfile(swarm_file):
        if os.path.getsize(swarm_file) == entry["size"]:
            found = _sha256(swarm_file).hexdigest()
            if found == entry["sha256"]:
                return _finish(swarm_file, target, uid, gid, found)
            module.warn(f"{rel}: the swarm's copy has sha256 {found}, manifest "
                        f"{entry['sha256']}; discarded, fetched from the mirror instead")
        os.unlink(swarm_file)
    partial = os.path.join(staging_dir, rel + ".partial")
    _makedirs(os.path.dirname(partial), -1, -1)
    kind, source = module.params["source_kind"], module.params["source"]
    if kind == "http":
        digest = fetch_http(module, source.rstrip("/") + "/" + rel, partial, entry["size"])
    elif kind == "path":
        digest = fetch_path(os.path.join(source, rel), partial, entry["size"])
    else:
        if not os.path.isfile(partial):
            raise StageError(f"{rel} was not copied to {partial}")
        digest = _sha256(partial)
    got_size = os.path.getsize(partial)
    if got_size < entry["size"]:
        raise StageError(
            f"{rel}: the source ended after {got_size} of {entry['size']} bytes; the partial file "
            "is kept and the next run resumes it"
        )
    found = digest.hexdigest()
    if got_size != entry["size"] or found != entry["sha256"]:
        os.unlink(partial)
        raise StageError(
            f"{rel} failed verification and was discarded: size {got_size} (manifest "
            f"{entry['size']}), sha256 {found} (manifest {entry['sha256']})"
        )
    return _finish(partial, target, uid, gid, found)


def _ids(module):
    uid = gid = -1
    try:
        if module.params["owner"]:
            uid = pwd.getpwnam(module.params["owner"]).pw_uid
        if module.params["group"]:
            gid = grp.getgrnam(module.params["group"]).gr_gid
    except KeyError as exc:
        # In check mode the account may be created by an earlier task that did not run.
        if not (module.check_mode or module.params["plan_only"]):
            module.fail_json(msg=f"unknown owner or group: {exc}")
    return uid, gid


def owned(dest, owner, group):
    """Whether dest and everything below it (links not followed) has this owner and group;
    None when neither is given, False when one does not exist."""
    if not owner and not group:
        return None
    try:
        uid = pwd.getpwnam(owner).pw_uid if owner else None
        gid = grp.getgrnam(group).gr_gid if group else None
    except KeyError:
        return False
    if not os.path.isdir(dest):
        return False
    paths = [dest]
    for root, dirs, files in os.walk(dest):
        paths.extend(os.path.join(root, name) for name in dirs + files)
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if (uid is not None and st.st_uid != uid) or (gid is not None and st.st_gid != gid):
            return False
    return True


def _validate_manifest(module):
    manifest = module.params["manifest"]
    files = manifest.get("files")
    if not manifest.get("name") or not isinstance(files, list) or not files:
        module.fail_json(msg="the manifest needs a name and a non-empty list of files")
    clean = []
    for entry in files:
        try:
            rel = _safe_relpath(str(entry["path"]))
            size = int(entry["size"])
            sha = str(entry["sha256"]).lower()
        except (KeyError, TypeError, ValueError, StageError) as exc:
            module.fail_json(msg=f"bad manifest entry {entry!r}: {exc}")
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha) or size < 0:
            module.fail_json(msg=f"bad manifest entry for {rel}: size {size!r}, sha256 {sha!r}")
        clean.append({"path": rel, "size": size, "sha256": sha})
    return str(manifest["name"]), sorted(clean, key=lambda e: e["path"])


P2P_DIR = ".p2p"


def p2p_refusal(p2p):
    """(address, interface) on the peer network, or a StageError naming what is missing or busy."""
    try:
        address, iface = address_in_network(p2p["network"])
        check_engine(p2p["python"])
    except P2PError as exc:
        raise StageError(str(exc)) from exc
    busy = port_in_use(address, p2p["port"])
    if busy:
        raise StageError(f"the peer-to-peer {busy}")
    return address, iface


def swarm_stage(module, name, files, todo, staging_dir, address):
    """Run the swarm for the files in todo; returns (swarm directory, report). The report's
    fallback says why HTTP is used for what the swarm did not complete."""
    p, p2p = module.params, module.params["p2p"]
    digest = manifest_digest(name, files)
    url = p["source"].rstrip("/") + "/" + torrent_file_name(digest)
    report = {"address": address, "torrent": url, "complete": [], "fallback": ""}
    try:
        response = open_url(url, headers=dict(p["headers"]), timeout=p["timeout"],
                            validate_certs=p["validate_certs"])
        torrent = response.read()
    except Exception as exc:  # urllib raises several types; HTTP staging goes on
        report["fallback"] = f"no torrent for manifest digest {digest[:32]} on the mirror ({exc})"
        return None, report
    save_path = os.path.join(staging_dir, P2P_DIR)
    _makedirs(save_path, -1, -1)
    web_seed = web_seed_url(p["source"], name) if p2p["web_seed"] else None
    expected = {"name": name, "files": [[e["path"], e["size"]] for e in files]}
    kwargs = dict(save_path=save_path, wanted=[e["path"] for e in todo], address=address,
                  expected=expected,
                  port=p2p["port"], peers=p2p["peers"], web_seed=web_seed,
                  upload_rate=p2p["upload_rate"], seed_seconds=p2p["seed_seconds"],
                  stall_seconds=p2p["stall_seconds"])
    try:
        if p2p["python"]:
            report.update(run_swarm_with(p2p["python"], save_path, kwargs, torrent))
        else:
            report.update(run_swarm(torrent, log=module.warn, **kwargs))
    except (P2PError, RuntimeError) as exc:
        report["fallback"] = f"the swarm failed: {exc}"
        return None, report
    missing = len(todo) - len(report["complete"])
    if missing:
        report["fallback"] = (f"the swarm {report['state']} with {missing} of {len(todo)} files "
                              "incomplete; the mirror serves them over HTTP")
    return os.path.join(save_path, name), report


def main():
    module = AnsibleModule(
        argument_spec=dict(
            manifest=dict(type="dict", required=True),
            dest=dict(type="path", required=True),
            staging_dir=dict(type="path", required=True),
            source_kind=dict(type="str", choices=["http", "path", "staged"], default="staged"),
            source=dict(type="str", default=""),
            verify=dict(type="str", choices=["fast", "full"], default="fast"),
            plan_only=dict(type="bool", default=False),
            min_free_bytes=dict(type="int", default=0),
            owner=dict(type="str"),
            group=dict(type="str"),
            headers=dict(type="dict", default={}, no_log=True),
            timeout=dict(type="int", default=60),
            validate_certs=dict(type="bool", default=True),
            p2p=dict(type="dict", options=dict(
                network=dict(type="str", required=True),
                port=dict(type="int", default=6881),
                peers=dict(type="list", elements="str", default=[]),
                upload_rate=dict(type="int", default=0),
                seed_seconds=dict(type="int", default=30),
                stall_seconds=dict(type="int", default=60),
                web_seed=dict(type="bool", default=True),
                python=dict(type="str", default=""),
            )),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["source_kind"] in ("http", "path") and not p["source"]:
        module.fail_json(msg="source_kind {} needs a source".format(p["source_kind"]))
    if p["p2p"] and p["source_kind"] != "http" and not p["plan_only"]:
        module.fail_json(msg="p2p needs source_kind http: the mirror holds the torrent and "
                         "serves what the swarm does not")
    name, files = _validate_manifest(module)
    dest, staging_dir = p["dest"], p["staging_dir"]
    base = os.path.basename(dest.rstrip("/"))
    label = base if base == name else f"{base} (manifest {name})"
    uid, gid = _ids(module)

    ledger = load_ledger(dest) if os.path.isdir(dest) else {"complete": False, "files": {}}
    hashed = []
    try:
        todo, fresh = plan_files(files, dest, staging_dir, ledger, p["verify"], hashed)
    except OSError as exc:
        module.fail_json(msg=f"cannot read {dest}: {exc}")
    bytes_to_fetch = sum(max(e["size"] - e["partial_bytes"], 0) for e in todo)
    free = _free_bytes(dest)
    result = dict(
        changed=False, plan=todo, fetched=[], hashed=hashed, bytes_to_fetch=bytes_to_fetch,
        free_bytes=free, complete=not todo, name=name,
    )
    manifest_path = os.path.join(dest, MANIFEST)
    manifest_doc = {"format": 1, "name": name, "files": files}
    stale_ledger = (
        set(ledger["files"]) - {e["path"] for e in files}
        or fresh
        or ledger.get("complete") != (not todo)
        or ledger.get("name") != name
    )
    try:
        with open(manifest_path) as handle:
            manifest_current = json.load(handle) == manifest_doc
    except (OSError, ValueError):
        manifest_current = False
    needs_change = bool(todo) or bool(stale_ledger) or (not todo and not manifest_current)
    result.update(converged=not needs_change, owned=owned(dest, p["owner"], p["group"]), p2p={})
    address = None
    if p["p2p"] and todo:
        try:
            address, iface = p2p_refusal(p["p2p"])
        except StageError as exc:
            module.fail_json(msg=f"model {label} in {dest}: {exc}. Nothing was changed.", **result)
        result["p2p"] = {"address": address, "interface": iface,
                         "peer": "{}:{}".format(address, p["p2p"]["port"])}

    if bytes_to_fetch + p["min_free_bytes"] > free:
        module.fail_json(
            msg=f"not enough disk for model {label} in {dest}: {_gib(bytes_to_fetch)} still to "
            f"fetch ({len(todo)} of {len(files)} files) and {_gib(p['min_free_bytes'])} to keep "
            f"free, but only {_gib(free)} is free on {_nearest_dir(dest)}. Nothing was changed.",
            **result,
        )
    if p["plan_only"] or module.check_mode or not needs_change:
        result["changed"] = needs_change and not p["plan_only"]
        module.exit_json(**result)

    try:
        _makedirs(dest, uid, gid)
        _makedirs(staging_dir, -1, -1)
        # A model that is being changed is not complete: serving checks this flag.
        if os.path.exists(manifest_path) and todo:
            os.unlink(manifest_path)
        files_by_path = {e["path"]: e for e in files}
        kept = {k: v for k, v in ledger["files"].items() if k in files_by_path}
        ledger = {"name": name, "complete": False, "files": dict(kept, **fresh)}
        save_ledger(dest, ledger)
        swarm_dir, swarm_done = None, set()
        if address:
            swarm_dir, report = swarm_stage(module, name, files, todo, staging_dir, address)
            result["p2p"].update(report)
            swarm_done = set(report["complete"])
        for entry in todo:
            ledger["files"].pop(entry["path"], None)
            swarm_file = (os.path.join(swarm_dir, entry["path"])
                          if swarm_dir and entry["path"] in swarm_done else None)
            ledger["files"][entry["path"]] = stage_file(module, entry, dest, staging_dir, uid, gid,
                                                        swarm_file)
            save_ledger(dest, ledger)
            result["fetched"].append(entry["path"])
        if swarm_dir:
            shutil.rmtree(os.path.join(staging_dir, P2P_DIR), ignore_errors=True)
        ledger["complete"] = True
        save_ledger(dest, ledger)
        tmp = manifest_path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(manifest_doc, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, manifest_path)
        for path in (manifest_path, os.path.join(dest, LEDGER)):
            os.chmod(path, 0o644)
            _chown(path, uid, gid)
        if os.path.isdir(staging_dir) and not any(
            files_ for _, _, files_ in os.walk(staging_dir)
        ):
            shutil.rmtree(staging_dir)
    except StageError as exc:
        result.update(changed=True, complete=False)
        module.fail_json(msg=f"model {label} in {dest}: {exc}", **result)
    except OSError as exc:
        result.update(changed=True, complete=False)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            module.fail_json(
                msg=f"disk full while staging model {label} in {dest} ({exc.strerror}: "
                f"{exc.filename}); {len(result['fetched'])} of {len(todo)} files were staged and "
                "verified and are kept, no partial file is in the model directory and the model "
                "is marked incomplete. Free space on that disk and run again: it resumes.",
                **result)
        module.fail_json(msg=f"model {label} in {dest}: {exc}", **result)
    result.update(changed=True, complete=True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
