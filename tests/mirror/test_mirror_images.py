"""``ascend-serve mirror`` with container images, against real registries (Debian's
docker-registry on loopback) and skopeo: an image pinned by digest is fetched into the bundle,
checked file by file, verified, pushed into a second registry (the site's) with the same digest,
and the inventory pointed at it; an unpinned or missing image, and a damaged copy, are refused.
A multi-platform image (an OCI index, as vllm-ascend's tags are) keeps its index digest through
the bundle and the site registry.

The image is a tiny one made here (one layer), in skopeo's ``dir:`` layout, and pushed into the
"upstream" registry by skopeo itself.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from paths import ROOT
from typer.testing import CliRunner, Result

from ascend_serve.cli.mirror import mirror_app

runner = CliRunner()


def invoke(*args: str) -> Result:
    return runner.invoke(mirror_app, list(args))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two registries on loopback: "upstream" (where images come from) and "site"."""
    procs: list[subprocess.Popen[bytes]] = []
    found: dict[str, str] = {}
    try:
        for name in ("upstream", "site"):
            root = tmp_path_factory.mktemp(f"registry-{name}")
            port = _free_port()
            config = root / "config.yml"
            config.write_text(yaml.safe_dump({
                "version": 0.1, "log": {"level": "error"},
                "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
                "http": {"addr": f"127.0.0.1:{port}"}}))
            procs.append(subprocess.Popen(["docker-registry", "serve", str(config)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            address = f"127.0.0.1:{port}"
            for _ in range(100):
                try:
                    if httpx.get(f"http://{address}/v2/", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            else:
                raise AssertionError(f"docker-registry {name} did not start on {address}")
            found[name] = address
        yield found
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def _blob(directory: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (directory / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _tiny_image(directory: Path, arch: str = "amd64") -> str:
    """A one-layer OCI image for linux/arch in skopeo's dir: layout; its manifest digest (hex)."""
    directory.mkdir()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        body = f"served by a tiny test image for {arch}\n".encode()
        info = tarfile.TarInfo("etc/ascend-serve-test")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps({
        "architecture": arch, "os": "linux", "config": {},
        "rootfs": {"type": "layers",
                   "diff_ids": [f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}"]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **_blob(directory, config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    **_blob(directory, layer)}],
    }).encode()
    (directory / "manifest.json").write_bytes(manifest)
    (directory / "version").write_text("Directory Transport Version: 1.1\n")
    return hashlib.sha256(manifest).hexdigest()


@pytest.fixture(scope="module")
def upstream_image(registries: dict[str, str], tmp_path_factory: pytest.TempPathFactory
                   ) -> tuple[str, str]:
    """(repository, digest) of the tiny image in the upstream registry."""
    seed = tmp_path_factory.mktemp("seed") / "image"
    digest = _tiny_image(seed)
    repository = f"{registries['upstream']}/ascend/tiny-serving"
    done = subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests",
                           "--dest-tls-verify=false", f"dir:{seed}",
                           f"docker://{repository}:v1"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    return repository, digest


def _inventory(tmp_path: Path, image: str) -> Path:
    inventory = tmp_path / "prod"
    shutil.copytree(ROOT / "inventories" / "prod", inventory)
    # Beside the example's own group files (group_vars/ascend_nodes/ is a directory): a file of
    # group ``all`` would lose to the example's ascend_nodes image.
    (inventory / "group_vars" / "ascend_nodes" / "zz-image.yml").write_text(yaml.safe_dump(
        {"vllm_service_runtime": "container", "vllm_service_image": image}))
    return inventory


def test_fetch_verify_push_and_point(tmp_path: Path, registries: dict[str, str],
                                     upstream_image: tuple[str, str]) -> None:
    repository, digest = upstream_image
    inventory = _inventory(tmp_path, f"{repository}:v1@sha256:{digest}")
    bundle = tmp_path / "bundle"
    insecure = ["--insecure-registry", registries["upstream"]]
    result = invoke("fetch", "-i", str(inventory), "--bundle", str(bundle), "--kind", "image",
                    *insecure, "--json")
    assert result.exit_code == 0, result.output
    fetched = json.loads(result.stdout)
    assert fetched["copied"] == 1
    directory = bundle / "images" / repository / digest
    files = {f["path"].rsplit("/", 1)[-1]: f for f in fetched["files"]}
    assert files["manifest.json"]["sha256"] == digest
    assert {p.name for p in directory.iterdir()} == set(files)
    for name, entry in files.items():
        if name not in ("manifest.json", "version"):
            assert entry["sha256"] == name  # content-addressed blobs
    # Again: the intact copy in the bundle is kept, nothing is copied.
    again = json.loads(invoke("fetch", "-i", str(inventory), "--bundle", str(bundle),
                              "--kind", "image", *insecure, "--json").stdout)
    assert (again["copied"], again["reused"]) == (0, 1)
    assert invoke("verify", "--bundle", str(bundle), "-i", str(inventory)).exit_code == 0

    # Into the site registry, digest unchanged; the inventory points at it.
    vars_file = tmp_path / "image.yml"
    pushed = invoke("push", "--bundle", str(bundle), "--registry", registries["site"],
                    "--insecure-registry", registries["site"], "--write-vars", str(vars_file),
                    "--json")
    assert pushed.exit_code == 0, pushed.output
    reference = f"{registries['site']}/ascend/tiny-serving@sha256:{digest}"
    assert json.loads(pushed.stdout)["images"] == [reference]
    assert yaml.safe_load(vars_file.read_text()) == {"vllm_service_image": reference}
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{reference}"], capture_output=True, check=True).stdout
    assert hashlib.sha256(raw).hexdigest() == digest

    # A damaged blob: verify names it, and push refuses the copy.
    layer = next(p for p in directory.iterdir() if p.name not in ("manifest.json", "version")
                 and json.loads((directory / "manifest.json").read_text())["layers"][0]["digest"]
                 .endswith(p.name))
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF
    layer.write_bytes(bytes(data))
    checked = invoke("verify", "--bundle", str(bundle), "-i", str(inventory), "--json")
    assert checked.exit_code == 1
    assert any(layer.name in p for p in json.loads(checked.stdout)["problems"])
    refused = invoke("push", "--bundle", str(bundle), "--registry", registries["site"],
                     "--insecure-registry", registries["site"])
    assert refused.exit_code == 1
    assert "its name says" in refused.stderr


def test_unpinned_and_missing_images_are_refused(tmp_path: Path, registries: dict[str, str],
                                                 upstream_image: tuple[str, str]) -> None:
    repository, _ = upstream_image
    bundle = tmp_path / "bundle"
    unpinned = invoke("fetch", "-i", str(_inventory(tmp_path / "a", f"{repository}:v1")),
                      "--bundle", str(bundle), "--kind", "image")
    assert unpinned.exit_code == 2
    assert "not pinned" in unpinned.stderr and "tiny-serving" in unpinned.stderr
    missing = invoke("fetch", "-i", str(_inventory(tmp_path / "b", f"{repository}@sha256:"
                                                                   + "0" * 64)),
                     "--bundle", str(bundle), "--kind", "image",
                     "--insecure-registry", registries["upstream"])
    assert missing.exit_code == 3
    assert "in none of the sources" in missing.stderr
    assert not bundle.exists()


def _copy_in(source: Path, reference: str) -> None:
    done = subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests",
                           "--dest-tls-verify=false", f"dir:{source}", f"docker://{reference}"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_multi_platform_image_keeps_its_index(tmp_path: Path,
                                                registries: dict[str, str]) -> None:
    """vllm-ascend publishes each tag for linux/amd64 and linux/arm64 (vllm-project/vllm-ascend
    ``.github/workflows/image_ubuntu.yml`` at 0d93853b: ``platforms: linux/amd64,linux/arm64``
    on a push), so its reference names an image index. Pinned by the index's digest, the
    bundle holds the index, both platforms' manifests and all their blobs (skopeo
    ``copy --all``); verify misses a platform manifest that is gone; the site registry serves
    the same index digest, and the arm64 image through it."""
    repository = f"{registries['upstream']}/ascend/tiny-multiarch"
    platforms: dict[str, tuple[str, int]] = {}
    for arch in ("amd64", "arm64"):
        seed = tmp_path / f"seed-{arch}"
        digest = _tiny_image(seed, arch)
        _copy_in(seed, f"{repository}:{arch}")
        platforms[arch] = (digest, (seed / "manifest.json").stat().st_size)
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": f"sha256:{digest}", "size": size,
                       "platform": {"architecture": arch, "os": "linux"}}
                      for arch, (digest, size) in platforms.items()],
    }).encode()
    index_digest = hashlib.sha256(index).hexdigest()
    put = httpx.put(f"http://{registries['upstream']}/v2/ascend/tiny-multiarch/manifests/v1",
                    content=index,
                    headers={"Content-Type": "application/vnd.oci.image.index.v1+json"})
    assert put.status_code == 201, put.text
    assert put.headers["Docker-Content-Digest"] == f"sha256:{index_digest}"

    inventory = _inventory(tmp_path, f"{repository}:v1@sha256:{index_digest}")
    bundle = tmp_path / "bundle"
    fetched = invoke("fetch", "-i", str(inventory), "--bundle", str(bundle), "--kind", "image",
                     "--insecure-registry", registries["upstream"], "--json")
    assert fetched.exit_code == 0, fetched.output
    directory = bundle / "images" / repository / index_digest
    assert (directory / "manifest.json").read_bytes() == index
    for digest, _ in platforms.values():
        manifest = json.loads((directory / f"{digest}.manifest.json").read_text())
        for blob in [manifest["config"], *manifest["layers"]]:
            assert (directory / blob["digest"].removeprefix("sha256:")).is_file()
    assert invoke("verify", "--bundle", str(bundle), "-i", str(inventory)).exit_code == 0

    pushed = invoke("push", "--bundle", str(bundle), "--registry", registries["site"],
                    "--insecure-registry", registries["site"], "--json")
    assert pushed.exit_code == 0, pushed.output
    site = f"{registries['site']}/ascend/tiny-multiarch"
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                          f"docker://{site}@sha256:{index_digest}"], capture_output=True,
                         check=True).stdout
    assert raw == index
    arm64 = subprocess.run(["skopeo", "inspect", "--config", "--tls-verify=false",
                            "--override-arch", "arm64",
                            f"docker://{site}@sha256:{index_digest}"], capture_output=True,
                           text=True, check=True).stdout
    assert json.loads(arm64)["architecture"] == "arm64"

    # One platform's manifest lost from the bundle: verify names what the index still needs.
    arm64_digest = platforms["arm64"][0]
    (directory / f"{arm64_digest}.manifest.json").unlink()
    checked = invoke("verify", "--bundle", str(bundle), "-i", str(inventory), "--json")
    assert checked.exit_code == 1
    assert any(arm64_digest in p and "missing" in p
               for p in json.loads(checked.stdout)["problems"]), checked.stdout
