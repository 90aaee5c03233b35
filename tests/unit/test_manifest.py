"""Model manifests: building, writing, loading, verifying; `ascend-serve model manifest/verify`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.serving.manifest import (
    CHUNK_SIZE,
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    ManifestFile,
    Problem,
    build_manifest,
    hash_file,
    list_files,
    load,
    parse,
    verify,
    write,
)

runner = CliRunner()

FILES = {
    "config.json": b'{"model_type": "llama"}\n',
    "model-00001-of-00002.safetensors": bytes(range(256)) * 40,
    "model-00002-of-00002.safetensors": b"\x00" * 1000,
    "tokenizer.json": '{"vocab": "\uff5c\u2581"}'.encode(),
    "sub/dir/extra.txt": b"nested\n",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    # Never listed: hidden files and folders anywhere, and the manifest itself.
    (root / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (root / ".cache" / "huggingface").mkdir(parents=True)
    (root / ".cache" / "huggingface" / "x.lock").write_text("lock")
    (root / "sub" / ".hidden").write_text("h")
    (root / MANIFEST_NAME).write_text("{}")
    return root


def test_build_lists_sorted_relative_posix_paths_with_sizes_and_sums(model_dir: Path) -> None:
    manifest = build_manifest(model_dir, "tiny")
    assert manifest.format == 1
    assert manifest.name == "tiny"
    assert [f.path for f in manifest.files] == sorted(FILES)
    for entry in manifest.files:
        assert entry.size == len(FILES[entry.path])
        assert entry.sha256 == _sha(FILES[entry.path])
    assert manifest.total_size == sum(len(d) for d in FILES.values())
    assert list_files(model_dir) == sorted(FILES)


def test_hash_file_reads_in_chunks_and_reports_progress(tmp_path: Path) -> None:
    data = bytes(range(256)) * (CHUNK_SIZE // 256) * 2 + b"tail"  # 2 MiB + 4 bytes
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    seen: list[int] = []
    size, sha256 = hash_file(path, seen.append)
    assert (size, sha256) == (len(data), _sha(data))
    assert seen == [CHUNK_SIZE, CHUNK_SIZE, 4]


def test_links_to_files_are_read_through(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "abc").write_bytes(b"weights")
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "model.safetensors").symlink_to(blobs / "abc")
    manifest = build_manifest(snapshot, "linked")
    assert manifest.files == [
        ManifestFile(path="model.safetensors", size=7, sha256=_sha(b"weights"))
    ]


def test_dangling_link_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "gone.bin").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ManifestError, match="not a regular file"):
        build_manifest(tmp_path, "x")


def test_build_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not a directory"):
        build_manifest(tmp_path / "absent", "x")


def test_write_load_round_trip(model_dir: Path) -> None:
    manifest = build_manifest(model_dir, "tiny-deepseek_v3")
    path = write(model_dir, manifest)
    assert path == model_dir / MANIFEST_NAME
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data) == ["format", "name", "files"]
    assert data["format"] == 1
    assert data["files"][0] == {"path": "config.json", "size": len(FILES["config.json"]),
                                "sha256": _sha(FILES["config.json"])}
    assert load(model_dir) == manifest
    assert load(path) == manifest  # the file itself, too
    # Writing again gives the same bytes, and the manifest never lists itself.
    assert build_manifest(model_dir, "tiny-deepseek_v3") == manifest
    assert not list(model_dir.glob(f".{MANIFEST_NAME}*"))


def test_load_without_manifest_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"no manifest at .*ascend-serve model manifest"):
        load(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"not valid JSON \(line 1, column 2"),
        ("[1, 2]", "must hold a JSON object, not list"),
        ('{"name": "x", "files": []}', 'has no "format" key'),
        ('{"format": 2, "name": "x", "files": []}', "has format 2; .* reads format 1 only"),
        ('{"format": 1, "files": []}', "name: Field required"),
        ('{"format": 1, "name": "x", "files": [], "extra": 1}', "extra: Extra inputs"),
        ('{"format": 1, "name": "", "files": []}', "name: String should have at least 1"),
    ],
)
def test_parse_errors_are_clear(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse(text, "m.json")


def _entry(path: str, size: int = 1, sha256: str = "a" * 64) -> dict[str, object]:
    return {"path": path, "size": size, "sha256": sha256}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ([_entry("/etc/passwd")], "not a normalized relative POSIX path"),
        ([_entry("../outside")], "leaves the model directory"),
        ([_entry("a/./b")], "not a normalized relative POSIX path"),
        ([_entry("a\\b")], "not a relative POSIX path"),
        ([_entry(".git/config")], "hidden entries are never listed"),
        ([_entry(MANIFEST_NAME)], "does not list itself"),
        ([_entry("b"), _entry("a")], "not sorted"),
        ([_entry("a"), _entry("a")], "listed twice"),
        ([_entry("a", size=-1)], "greater than or equal to 0"),
        ([_entry("a", sha256="A" * 64)], "64 lower-case hex digits"),
    ],
)
def test_parse_rejects_bad_entries(files: list[dict[str, object]], message: str) -> None:
    text = json.dumps({"format": 1, "name": "x", "files": files})
    with pytest.raises(ManifestError, match=message):
        parse(text)


def test_verify_clean_directory_has_no_problems(model_dir: Path) -> None:
    manifest = build_manifest(model_dir, "tiny")
    (model_dir / "unlisted.txt").write_text("not a problem")
    seen: list[int] = []
    assert verify(model_dir, manifest, seen.append) == []
    assert sum(seen) == manifest.total_size


def test_verify_finds_missing_size_and_sha256_problems(model_dir: Path) -> None:
    manifest = build_manifest(model_dir, "tiny")
    (model_dir / "config.json").unlink()
    shard = model_dir / "model-00002-of-00002.safetensors"
    shard.write_bytes(b"\x00" * 999)
    tok = model_dir / "tokenizer.json"
    tok_bytes = bytearray(FILES["tokenizer.json"])
    tok_bytes[0] ^= 0xFF  # same size, other content
    tok.write_bytes(bytes(tok_bytes))
    (model_dir / "sub" / "dir" / "extra.txt").unlink()
    (model_dir / "sub" / "dir" / "extra.txt").mkdir()

    problems = verify(model_dir, manifest)
    by_path = {p.path: p for p in problems}
    assert sorted(by_path) == ["config.json", "model-00002-of-00002.safetensors",
                               "sub/dir/extra.txt", "tokenizer.json"]
    assert by_path["config.json"] == Problem(
        path="config.json", kind="missing",
        expected=f"a file of {len(FILES['config.json'])} bytes", found="no file")
    assert by_path["model-00002-of-00002.safetensors"] == Problem(
        path="model-00002-of-00002.safetensors", kind="size",
        expected="1000 bytes", found="999 bytes")
    assert by_path["tokenizer.json"] == Problem(
        path="tokenizer.json", kind="sha256",
        expected=_sha(FILES["tokenizer.json"]), found=_sha(bytes(tok_bytes)))
    assert by_path["sub/dir/extra.txt"].kind == "missing"
    assert by_path["sub/dir/extra.txt"].found == "a directory"
    text = str(by_path["tokenizer.json"])
    assert "tokenizer.json" in text and "sha256 mismatch" in text
    assert _sha(FILES["tokenizer.json"]) in text and _sha(bytes(tok_bytes)) in text


def test_manifest_model_is_frozen_json_schema() -> None:
    manifest = Manifest(format=1, name="x", files=[])
    assert json.loads(manifest.to_json()) == {"format": 1, "name": "x", "files": []}


# --- CLI: ascend-serve model manifest / verify -------------------------------------------------


def test_cli_manifest_then_verify_ok(model_dir: Path) -> None:
    result = runner.invoke(app, ["model", "manifest", str(model_dir), "--name", "tiny"])
    assert result.exit_code == 0, result.output
    assert "tiny" in result.stdout and "5 files" in result.stdout
    assert load(model_dir).name == "tiny"

    result = runner.invoke(app, ["model", "verify", str(model_dir)])
    assert result.exit_code == 0, result.output
    assert "ok" in result.stdout

    result = runner.invoke(app, ["model", "verify", str(model_dir), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == [] and report["files"] == 5


def test_cli_manifest_name_defaults(model_dir: Path) -> None:
    result = runner.invoke(app, ["model", "manifest", str(model_dir), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["name"] == "model"  # the folder's name
    assert [e["path"] for e in report["entries"]] == sorted(FILES)
    write(model_dir, build_manifest(model_dir, "kept-name"))
    result = runner.invoke(app, ["model", "manifest", str(model_dir), "--json"])
    assert json.loads(result.stdout)["name"] == "kept-name"  # the current manifest's


def test_cli_verify_corrupted_file_exits_1_with_a_table(model_dir: Path) -> None:
    write(model_dir, build_manifest(model_dir, "tiny"))
    (model_dir / "model-00001-of-00002.safetensors").write_bytes(b"x" * 10240)
    result = runner.invoke(app, ["model", "verify", str(model_dir)])
    assert result.exit_code == 1, result.output
    assert "model-00001-of-00002.safetensors" in result.stdout
    assert "sha256" in result.stdout and "1 problem" in result.stdout

    result = runner.invoke(app, ["model", "verify", str(model_dir), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert [(p["path"], p["kind"]) for p in report["problems"]] == [
        ("model-00001-of-00002.safetensors", "sha256")]


def test_cli_bad_input_exits_2(tmp_path: Path, model_dir: Path) -> None:
    result = runner.invoke(app, ["model", "verify", str(model_dir)])  # manifest is "{}"
    assert result.exit_code == 2
    assert 'no "format" key' in result.stderr
    (model_dir / MANIFEST_NAME).unlink()
    result = runner.invoke(app, ["model", "verify", str(model_dir)])
    assert result.exit_code == 2
    assert "no manifest" in result.stderr
    for command in ("verify", "manifest"):
        result = runner.invoke(app, ["model", command, str(tmp_path / "absent")])
        assert result.exit_code == 2
        assert "not a directory" in result.stderr
