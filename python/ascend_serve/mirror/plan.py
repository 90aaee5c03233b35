"""What a site must mirror for an inventory: every artifact, with its sha256 where one is pinned.

Derived from each host's resolved variables (:mod:`.inventory`), as the roles consume them, over
the host's ``ascend_stack_resolved`` (:func:`.inventory.resolved_sets`, the role's one resolution):

- vendor installers: ``npu_driver`` (driver, firmware) and ``cann`` (toolkit, kernels/ops, NNAL
  when ``cann_nnal``), the file names of the roles' defaults (their vendor sources are cited
  there), the sha256 from ``npu_driver_sha256`` / ``cann_sha256`` (the roles refuse a file that
  is not pinned);
- wheels (not for hosts with ``vllm_service_runtime: container``, whose image brings them):
  every distribution of the serving environment's lock
  (``data/locks/<set>/py<X.Y>-<arch>/``, stage files with ``--hash=sha256:`` lines, the target
  ``python_env`` installs: ``python_env_python_version`` or, when empty, every Python the set
  allows), each with the hashes the lock accepts;
- OS packages: ``os_base``'s package list of the OS family (``vars/<family>.yml``) plus
  ``os_base_extra_packages`` and the kernel's headers; the role pins no version and no sha256,
  so the package manager resolves them at fetch;
- model files: ``model_store``'s manifest (``model_store_manifest``, else the source's own
  ``ascend-serve-manifest.json`` when the source is a directory on this machine);
- images: ``vllm_service_image`` of the hosts that serve in a container
  (``vllm_service_runtime: container``), pinned by the reference's ``@sha256:`` digest (the
  registry's manifest digest); a reference by tag alone is listed unpinned.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ascend_serve.mirror.inventory import HostVars, InventoryError, read_hosts, resolved_sets
from ascend_serve.resources import role_path
from ascend_serve.serving import manifest as model_manifest
from ascend_serve.stack.lock import LockError, default_lock_root, normalize, read_plan
from ascend_serve.stack.matrix import MatrixError, load_matrix

Kind = Literal["vendor", "wheel", "os", "model", "image"]
KINDS: tuple[Kind, ...] = ("vendor", "wheel", "os", "model", "image")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
AT_FETCH = "resolved by the package manager at fetch"

# Vendor installers: (role, the role's file-name variable, component); the pins are the role's
# ``<role>_sha256``.
VENDOR_FILES = (
    ("npu_driver", "npu_driver_driver_file", "driver"),
    ("npu_driver", "npu_driver_firmware_file", "firmware"),
    ("cann", "cann_toolkit_file", "toolkit"),
    ("cann", "cann_kernels_file", "kernels"),
    ("cann", "cann_nnal_file", "nnal"),
)
# The role variable holding the version each vendor file installs.
VERSION_VARIABLES = {"driver": "npu_driver_version", "firmware": "npu_driver_firmware_version",
                     "toolkit": "cann_version", "kernels": "cann_version", "nnal": "cann_version"}
# Where the roles take each kind from (a controller directory or a URL); model_store's source
# only when it is a directory on the controller or a URL (not a path on the host).
CONFIGURED_SOURCES = {
    "vendor": ("npu_driver_artifact_dir", "npu_driver_artifact_url", "cann_artifact_dir",
               "cann_artifact_url"),
    "model": ("model_store_source",),
}
OS_FAMILIES = ("Debian", "RedHat", "Kylin_Linux_Advanced_Server")


class PlanError(ValueError):
    """The artifact list cannot be made: the message names the host and the cause."""


class Artifact(BaseModel):
    """One thing to mirror."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind
    name: str = Field(description="File name, distribution or package name.")
    version: str = ""
    path: str = Field(description="Where it lies in a bundle (relative POSIX path); for a "
                                  "wheel, its directory, the file name is the index's.")
    sha256: str | None = Field(default=None, description="The pinned sha256, None when none.")
    accepted: list[str] = Field(default_factory=list,
                                description="Wheels: every sha256 the lock accepts.")
    platform: str = Field(default="", description="Wheels: the lock's target platform, "
                                                  "e.g. x86_64-manylinux_2_31, and Python.")
    pin: str = Field(default="", description="Where the pin comes from (variable, lock file).")
    note: str = ""
    component: str = ""
    hosts: list[str] = Field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.path}" + (f":{self.name}" if self.kind == "wheel" else "")

    @property
    def pinned(self) -> bool:
        return bool(self.sha256 and SHA256_RE.match(self.sha256)) or bool(self.accepted)

    def accepts(self, sha256: str) -> bool:
        return sha256 == self.sha256 or sha256 in self.accepted


class Issue(BaseModel):
    """Something found while listing that keeps artifacts of one kind from being fetched."""

    kind: str
    message: str


class Plan(BaseModel):
    """Every artifact of an inventory, and what could not be pinned or found."""

    inventory: str
    hosts: list[str]
    artifacts: list[Artifact]
    issues: list[Issue] = Field(default_factory=list)
    sources: dict[str, list[str]] = Field(
        default_factory=dict,
        description="The inventory's own sources per kind (the roles' artifact_dir/url, "
                    "model_store_source), tried after the ones given to fetch.")

    def of_kind(self, *kinds: str) -> list[Artifact]:
        return [a for a in self.artifacts if a.kind in kinds]

    def problems(self, kinds: Iterable[str] = KINDS) -> list[str]:
        """What keeps the artifacts of ``kinds`` from being fetched: the issues found while
        listing, and every vendor installer without a sha256."""
        wanted = set(kinds)
        found = [i.message for i in self.issues if i.kind in wanted]
        if "vendor" in wanted:
            found += [f"{a.name}: {a.note}" for a in self.of_kind("vendor") if not a.pinned]
        return found

    def apply_pins(self, pins: dict[str, str], origin: str) -> None:
        """Pin the vendor installers the inventory does not pin from ``pins`` (name -> sha256,
        e.g. the vendor's published list); a pin that differs from the inventory's is refused."""
        for item in self.of_kind("vendor"):
            sha = pins.get(item.name)
            if sha is None:
                continue
            if item.sha256 and item.sha256 != sha:
                raise PlanError(f"{item.name}: the inventory pins {item.sha256} ({item.pin}), "
                                f"{origin} says {sha}")
            if not item.sha256:
                item.sha256, item.note = sha, f"pinned by {origin}"


def read_pins(path: Path) -> dict[str, str]:
    """File name -> sha256 from a vars file (its ``*_sha256`` mappings, or one plain mapping) or
    ``sha256sum`` output (``<sha256>  <file>`` per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from exc
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and all(re.match(r"^[0-9a-f]{64}\s+\*?\S", line) for line in lines):
        return {line.split()[1].lstrip("*").rsplit("/", 1)[-1]: line.split()[0]
                for line in lines}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlanError(f"{path} is neither YAML nor sha256sum output: {exc}") from exc
    if not isinstance(data, dict):
        raise PlanError(f"{path}: no pins (a mapping, or sha256sum output)")
    nested = [v for k, v in data.items() if str(k).endswith("_sha256") and isinstance(v, dict)]
    pins = {str(k): str(v) for group in (nested or [data]) for k, v in group.items()}
    bad = sorted(k for k, v in pins.items() if not SHA256_RE.match(v))
    if bad:
        raise PlanError(f"{path}: not a sha256 for {', '.join(bad)}")
    return pins


def _arches(host: HostVars, arch: list[str] | None, stack: Any) -> list[str]:
    """The CPU architectures the host's installers are named for: ``--arch``, else the
    inventory's ``ansible_architecture``, else those of ``preflight_allowed_architectures`` whose
    driver installer is pinned, else all of them."""
    if arch:
        return arch
    known = host.get("ansible_architecture")
    if known:
        return [str(known)]
    allowed = [str(a) for a in host.get("preflight_allowed_architectures", ["aarch64"])]
    pins = host.get("npu_driver_sha256", {}) or {}
    pinned = [a for a in allowed
              if host.role_file("npu_driver", "npu_driver_driver_file", a, stack) in pins]
    return pinned or allowed


def _vendor(host: HostVars, arches: list[str], stack: dict[str, Any]) -> list[Artifact]:
    """The vendor installers the roles ask for, with the versions the roles install (their
    variables over ``ascend_stack_resolved``)."""
    versions = host.with_vars(ascend_stack_resolved=stack)
    out: list[Artifact] = []
    for a in arches:
        for role, variable, component in VENDOR_FILES:
            if component == "nnal" and not host.get("cann_nnal", True):
                continue
            name = host.role_file(role, variable, a, stack)
            pins = host.get(f"{role}_sha256", {}) or {}
            if not isinstance(pins, dict):
                raise PlanError(f"host {host.name}: {role}_sha256 is not a mapping")
            sha = pins.get(name)
            note = ""
            if sha is None:
                note = f"not pinned in {role}_sha256"
            elif not SHA256_RE.match(str(sha)):
                note = f"{role}_sha256 holds {sha!r}, not a sha256"
            out.append(Artifact(kind="vendor", name=name, component=component,
                                version=str(versions.get(VERSION_VARIABLES[component], "")),
                                path=f"vendor/{name}",
                                sha256=str(sha) if sha and not note else None,
                                pin=f"{role}_sha256", note=note, hosts=[host.name]))
    return out


_REQ_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_HASH_RE = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def lock_entries(text: str) -> list[tuple[str, str, list[str]]]:
    """``(name, version, [sha256, ...])`` of each requirement of a hash-pinned stage file."""
    entries: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        stripped = line.strip()
        match = _REQ_RE.match(stripped)
        if match:
            entries.append((normalize(match.group(1)), match.group(2), []))
        if entries and not stripped.startswith("#"):
            entries[-1][2].extend(_HASH_RE.findall(stripped))
    return entries


def _wheels(host: HostVars, arches: list[str], stack: dict[str, Any],
            lock_root: Path, issues: list[Issue]) -> list[Artifact]:
    serving = stack["serving"]  # the set python_env installs
    env_name = str(serving["name"])
    wanted_py = str(host.get("python_env_python_version", "") or "")
    pythons = [wanted_py] if wanted_py else list(serving["python"])
    out: list[Artifact] = []
    for a in arches:
        for py in pythons:
            target = f"py{py}-{a}"
            directory = lock_root / env_name / target
            try:
                plan = read_plan(directory)
            except LockError as exc:
                issues.append(Issue(kind="wheel", message=f"host {host.name}: set "
                                    f"{env_name} has no lock for {target} ({exc})"))
                continue
            for stage in plan.get("stages", []):
                lock_file = directory / stage["file"]
                for name, version, hashes in lock_entries(lock_file.read_text(encoding="utf-8")):
                    out.append(Artifact(
                        kind="wheel", name=name, version=version,
                        path=f"wheels/{env_name}/{target}", accepted=sorted(set(hashes)),
                        pin=str(PurePosixPath("locks", env_name, target, stage["file"])),
                        component=stage.get("name", ""), hosts=[host.name],
                        platform=f"{plan['target']['platform']} py{py}",
                        note="" if hashes else "no hash in the lock"))
    return out


def _os_family(host: HostVars, os_family: str | None) -> list[str]:
    if os_family:
        return [os_family]
    known = host.get("ansible_os_family")
    if known:
        return [str(known)]
    if host.get("os_base_apt_repositories"):
        return ["Debian"]
    if host.get("os_base_dnf_repositories"):
        return ["RedHat"]
    return list(OS_FAMILIES)


def _os_packages(host: HostVars, families: list[str]) -> list[Artifact]:
    out: list[Artifact] = []
    kernel = str(host.get("os_base_kernel_release", "") or "")
    for family in families:
        path = role_path("os_base", "vars", f"{family}.yml")
        if not path.is_file():
            raise PlanError(f"host {host.name}: os_base has no vars for OS family {family}")
        data = host.loader.load_from_file(str(path), trusted_as_template=True)
        family_host = host.with_vars(**data, _os_base_kernel=kernel or "KERNEL")
        names = [str(n) for n in family_host.get("_os_base_packages", [])]
        names += [str(n) for n in host.get("os_base_extra_packages", []) or []]
        if host.get("os_base_kernel_headers", True):
            names += [str(n) for n in family_host.get("_os_base_kernel_dev_packages", [])]
        names += [str(n) for n in family_host.get("_os_base_hold_tool_packages", [])]
        for name in dict.fromkeys(names):
            note = AT_FETCH
            if "KERNEL" in name:
                name = name.replace("KERNEL", "$(uname -r)")
                note += "; the host's running kernel (os_base_kernel_release is empty)"
            out.append(Artifact(kind="os", name=name, path=f"os/{family}/{name}",
                                component=family, pin="os_base", note=note, hosts=[host.name]))
    return out


def _models(host: HostVars, issues: list[Issue]) -> list[Artifact]:
    name = str(host.get("model_store_name", "") or "")
    if not name:
        return []
    kind = str(host.get("model_store_source_kind", "http"))
    source = str(host.get("model_store_source", "") or "")
    pinned = str(host.get("model_store_manifest", "") or "")
    manifest_file: Path | None = None
    if pinned:
        manifest_file = Path(pinned)
    elif kind == "controller" and source:
        manifest_file = model_manifest.manifest_path(Path(source))
    if manifest_file is None or not manifest_file.is_file():
        where = (f"{manifest_file} does not exist" if manifest_file
                 else f"the source's manifest ({kind} {source}) is read at fetch")
        return [Artifact(kind="model", name=model_manifest.MANIFEST_NAME,
                         path=f"models/{name}/{model_manifest.MANIFEST_NAME}",
                         component=name, pin="model_store_manifest",
                         note=f"files unknown: {where}", hosts=[host.name])]
    try:
        parsed = model_manifest.load(manifest_file)
    except model_manifest.ManifestError as exc:
        issues.append(Issue(kind="model", message=f"host {host.name}: model manifest "
                                                  f"{manifest_file}: {exc}"))
        return []
    own = hashlib.sha256(manifest_file.read_bytes()).hexdigest()
    return [Artifact(kind="model", name=model_manifest.MANIFEST_NAME, path=f"models/{name}/"
                     f"{model_manifest.MANIFEST_NAME}", sha256=own, component=name,
                     pin=str(manifest_file), hosts=[host.name])] + [
        Artifact(kind="model", name=f.path, version=str(f.size), path=f"models/{name}/{f.path}",
                 sha256=f.sha256, component=name, pin=str(manifest_file), hosts=[host.name])
        for f in parsed.files]


# An image reference: [registry[:port]/]repository[:tag][@sha256:digest].
IMAGE_REF_RE = re.compile(r"^(?P<repo>[^@]+?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
                          r"(?:@sha256:(?P<digest>[0-9a-f]{64}))?$")


def split_image(ref: str) -> tuple[str, str, str]:
    """(repository with its registry, tag, digest hex) of an image reference; a ``:`` in the
    last path part starts the tag (one in the first part is a registry's port)."""
    match = IMAGE_REF_RE.match(ref)
    if match is None:
        raise ValueError(f"not an image reference: {ref!r}")
    return match["repo"], match["tag"] or "", match["digest"] or ""


def _images(host: HostVars, issues: list[Issue]) -> list[Artifact]:
    if str(host.get("vllm_service_runtime", "venv")) != "container":
        return []
    ref = str(host.get("vllm_service_image", "") or "")
    try:
        repo, tag, digest = split_image(ref)
    except ValueError as exc:
        issues.append(Issue(kind="image", message=f"host {host.name}: vllm_service_image: {exc} "
                                                  f"(vllm_service_runtime is container)"))
        return []
    return [Artifact(kind="image", name=repo, version=tag,
                     path=f"images/{repo}/{digest or tag or 'latest'}",
                     sha256=digest or None, component="vllm_service", pin="vllm_service_image",
                     note="" if digest else "not pinned: the tag is resolved by the registry "
                                            "at pull; pin the image by @sha256 digest",
                     hosts=[host.name])]


def _merge(artifacts: Iterable[Artifact], issues: list[Issue]) -> list[Artifact]:
    merged: dict[str, Artifact] = {}
    for item in artifacts:
        seen = merged.get(item.key)
        if seen is None:
            merged[item.key] = item
            continue
        if (seen.sha256, seen.version, seen.accepted) != (item.sha256, item.version,
                                                          item.accepted):
            issues.append(Issue(kind=item.kind, message=(
                f"{item.path}: hosts {', '.join(seen.hosts)} and {', '.join(item.hosts)} pin it "
                f"differently ({seen.sha256 or seen.version} vs {item.sha256 or item.version})")))
        seen.hosts = sorted(set(seen.hosts) | set(item.hosts))
    return list(merged.values())


def build_plan(inventory: Path, *, limit: str | None = None, arch: list[str] | None = None,
               os_family: str | None = None, matrix_file: Path | None = None,
               lock_root: Path | None = None) -> Plan:
    """The artifact list of ``inventory``."""
    try:
        matrix = load_matrix(matrix_file)
    except MatrixError as exc:
        raise PlanError(str(exc)) from exc
    try:
        hosts = read_hosts(inventory, limit)
    except InventoryError as exc:
        raise PlanError(str(exc)) from exc
    issues: list[Issue] = []
    found: list[Artifact] = []
    sources: dict[str, list[str]] = {}
    for host in hosts:
        try:
            stack = resolved_sets(host, matrix)  # ascend_stack_resolved, as the role sets it
            arches = _arches(host, arch, stack)
            found += _vendor(host, arches, stack)
            # A host that serves in a container installs no wheels (site.yml leaves python_env
            # out there): the image brings them.
            if host.get("vllm_service_runtime", "venv") != "container":
                found += _wheels(host, arches, stack, lock_root or default_lock_root(), issues)
            found += _os_packages(host, _os_family(host, os_family))
            found += _models(host, issues)
            found += _images(host, issues)
            for kind, variables in CONFIGURED_SOURCES.items():
                for variable in variables:
                    value = str(host.get(variable, "") or "")
                    if variable == "model_store_source" and \
                            host.get("model_store_source_kind", "http") == "path":
                        continue
                    if value and value not in sources.setdefault(kind, []):
                        sources[kind].append(value)
        except InventoryError as exc:
            raise PlanError(str(exc)) from exc
    artifacts = _merge(found, issues)
    return Plan(inventory=str(inventory), hosts=[h.name for h in hosts], artifacts=artifacts,
                issues=issues, sources=sources)
