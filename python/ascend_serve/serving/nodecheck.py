"""Checks of a node before ``ascend-serve serve`` starts vLLM on it.

Each check reads what the vendor's tools and the serving environment themselves report: npu-smi
for chip health, the environment's own interpreter for installed versions, the model directory
against its manifest, the CANN / ATB ``set_env.sh`` scripts the launcher sources.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_smi import hbm_total_mb
from ascend_serve.serving.fit import FitError, FitReport, NotEstimableError, estimate
from ascend_serve.serving.manifest import ManifestError, load, verify
from ascend_serve.serving.profiles import Profile, set_problems
from ascend_serve.stack.matrix import Matrix, StackSet, load_matrix, resolve
from ascend_serve.stack.npusmi import (
    Chip,
    NpuSmiParseError,
    NpuSmiRunError,
    locate,
    parse_info,
    query_info,
)

# Where the python_env role records the serving environment (stack set, interpreter).
PYTHON_ENV_FACT = Path("/etc/ansible/facts.d/ascend_python_env.fact")
ASCEND_SET_ENV = (
    "/usr/local/Ascend/ascend-toolkit/set_env.sh",
    "/usr/local/Ascend/nnal/atb/set_env.sh",
)


@dataclass
class Finding:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_env_fact(path: Path = PYTHON_ENV_FACT) -> dict[str, Any] | None:
    """A role's local fact (default: python_env's), or None where the role has not run."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


CANN_FACT = Path("/etc/ansible/facts.d/ascend_cann.fact")


def ascend_set_env(fact_path: Path = CANN_FACT) -> list[str]:
    """What an NPU server must source: the cann role's fact lists it (from CANN 8.5 the
    toolkit's set_env.sh is under ``cann-<version>/``); else the classic paths."""
    fact = read_env_fact(fact_path)
    scripts = fact.get("set_env") if fact else None
    if isinstance(scripts, list) and all(isinstance(s, str) for s in scripts) and scripts:
        return list(scripts)
    return list(ASCEND_SET_ENV)


def serving_env(venv: Path | None, fact: dict[str, Any] | None) -> Path | None:
    """The serving environment: ``venv`` if given, else the python_env role's (its fact)."""
    if venv is not None:
        return venv.absolute()
    if fact and fact.get("python"):
        return Path(fact["python"]).parent.parent
    return None


NO_SERVING_ENV = ("no serving environment: pass --venv (the python_env role records one in "
                  "/etc/ansible/facts.d/ascend_python_env.fact)")


def read_chips(npu_smi: str | None) -> list[Chip] | str:
    """The chips ``npu-smi info`` lists, or why they cannot be read."""
    tool = locate(npu_smi)
    if tool is None:
        return "npu-smi not found: is the NPU driver installed?"
    try:
        return parse_info(query_info(tool))
    except NpuSmiRunError as exc:
        return str(exc)
    except NpuSmiParseError as exc:
        return f"cannot read npu-smi info: {exc}"


def hbm_gib(chips: list[Chip]) -> float | None:
    """The HBM of one chip in GiB as npu-smi prints it (the smallest over the chips), or None
    where no chip prints an HBM total. npu-smi's MB are MiB: 65536 MB a 64 GB chip."""
    total = hbm_total_mb([c.model_dump() for c in chips])
    return None if total is None else total / 1024


def check_npus(profile: Profile, npu_smi: str | None,
               chips: list[Chip] | str | None = None) -> Finding:
    """Enough chips for the profile's layout, and every chip healthy (``chips``: as
    :func:`read_chips` returned them, else read here)."""
    chips = read_chips(npu_smi) if chips is None else chips
    if isinstance(chips, str):
        return Finding("npus", False, chips)
    bad = [c for c in chips if c.health != "OK"]
    if bad:
        listed = ", ".join(f"NPU {c.npu} chip {c.chip} {c.health}" for c in bad)
        return Finding("npus", False, f"not healthy: {listed}")
    families = sorted({c.family for c in chips if c.family})
    wanted = _SERIES_FAMILY.get(profile.chip, profile.chip)
    if families and wanted not in families:
        return Finding("npus", False, f"the node's chips are {', '.join(families)}; profile "
                       f"{profile.name} is for {profile.chip}: pick a profile for this hardware "
                       "(ascend-serve profiles list)")
    if len(chips) < profile.chips_per_node:
        return Finding("npus", False, f"{len(chips)} chips, the profile needs "
                       f"{profile.chips_per_node} per node")
    return Finding("npus", True, f"{len(chips)} chips, all OK")


# A profile's chip -> the npu-smi family the node must show (npu_smi reader's chip_family:
# 910B4 prints as a 910B-family name on Atlas A2, 910C as "Ascend910" with Phy-ID on Atlas A3).
_SERIES_FAMILY = {"910B": "910B", "910B4": "910B", "910C": "910C"}


def check_set_env(scripts: list[str]) -> Finding:
    missing = [s for s in scripts if not Path(s).is_file()]
    if missing:
        return Finding("ascend-env", False, "missing: " + ", ".join(missing)
                       + " (install CANN and NNAL; the launcher sources them)")
    return Finding("ascend-env", True, "sourced by the launcher: " + ", ".join(scripts))


def installed_versions(python: Path, names: list[str]) -> dict[str, str | None]:
    """What the environment's own interpreter reports for each distribution."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try:\n"
        "        out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{python} failed: {proc.stderr.strip()[-300:]}")
    data = json.loads(proc.stdout)
    return {n: data.get(n) for n in names}


def check_set(profile: Profile, stack: StackSet, matrix: Matrix | None = None) -> Finding:
    """The version set serves the profile (platform, chip, the tutorial's vllm-ascend release)."""
    problems = set_problems(profile, stack, matrix)
    if problems:
        return Finding("set", False, "; ".join(problems))
    since = f" (>= {profile.min_vllm_ascend})" if profile.min_vllm_ascend else ""
    return Finding("set", True, f"set {stack.name} serves profile {profile.name}{since}")


def check_versions(python: Path, stack: StackSet) -> Finding:
    """The serving environment holds exactly the set's versions."""
    wanted = stack.distributions()
    try:
        found = installed_versions(python, sorted(wanted))
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        return Finding("versions", False, f"cannot ask {python}: {exc}")
    wrong = [f"{n} {found[n] or 'missing'} (set {stack.name} has {v})"
             for n, v in sorted(wanted.items()) if found[n] != v]
    if wrong:
        return Finding("versions", False, "; ".join(wrong))
    return Finding("versions", True, f"set {stack.name}: "
                   + ", ".join(f"{n} {v}" for n, v in sorted(wanted.items())))


def check_model(model_dir: Path, hashes: bool = False) -> Finding:
    """Every file of the model's manifest present with its size (and SHA-256 with ``hashes``)."""
    if not model_dir.is_dir():
        return Finding("model", False, f"{model_dir} is not a directory")
    try:
        manifest = load(model_dir)
    except ManifestError as exc:
        return Finding("model", False, str(exc))
    problems = verify(model_dir, manifest, hashes=hashes)
    if problems:
        shown = "; ".join(f"{p.path}: {p.kind} (expected {p.expected}, found {p.found})"
                          for p in problems[:5])
        more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
        return Finding("model", False, f"{len(problems)} problem(s): {shown}{more}")
    how = "sizes and SHA-256" if hashes else "sizes"
    return Finding("model", True, f"{len(manifest.files)} files match the manifest ({how})")


def model_config(profile: Profile, model_dir: Path | None) -> dict[str, Any] | None:
    """The local config.json where present, else the profile's copy of the public one."""
    if model_dir is not None:
        try:
            data = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return data
        except (OSError, ValueError):
            pass
    return profile.model.config


def fit_report(profile: Profile, model_dir: Path | None, hbm: float | None = None,
               hbm_source: str | None = None) -> FitReport | None:
    """The memory estimate per chip, or None when no config.json is known for the model.

    ``hbm``: the HBM of one of the node's chips in GiB, as npu-smi reports it (``hbm_source``
    says where it was read); None estimates against the profile chip's nominal HBM, for a
    node whose chips cannot be read yet (no driver). Ignored for CPU profiles (their
    ``memory_gib``)."""
    config = model_config(profile, model_dir)
    if config is None:
        return None
    vllm = profile.vllm
    kwargs: dict[str, Any] = {}
    if profile.device == "cpu":
        # vLLM's CPU build: no device workspace, a smaller allowance for activations.
        kwargs.update(hbm_gib=profile.memory_gib, hbm_source="the profile's memory_gib",
                      overhead_gib=0.5)
    elif hbm is not None:
        kwargs.update(hbm_gib=hbm, hbm_source=hbm_source or "npu-smi")
    return estimate(
        config,
        chip=profile.chip,
        tensor_parallel=profile.parallel.tensor,
        data_parallel=profile.parallel.data,
        expert_parallel=profile.parallel.expert,
        weight_dtype=profile.model.weights,
        max_model_len=int(vllm.get("max-model-len") or config.get("max_position_embeddings")
                          or 4096),
        max_num_seqs=int(vllm.get("max-num-seqs", 256)),
        gpu_memory_utilization=float(vllm.get("gpu-memory-utilization", 0.9)),
        chips=profile.chips_per_node * profile.nodes if profile.device == "npu" else 1,
        **kwargs,
    )


def check_fit(profile: Profile, model_dir: Path | None, hbm: float | None = None) -> Finding:
    """The memory fit against ``hbm`` GiB per chip (npu-smi), else the chip's nominal HBM."""
    try:
        report = fit_report(profile, model_dir, hbm)
    except NotEstimableError as exc:
        return Finding("fit", True, str(exc))
    except FitError as exc:
        return Finding("fit", False, str(exc))
    if report is None:
        return Finding("fit", True, "no config.json known for this model: not estimated")
    if not report.fits:
        detail = report.reason + (f"; {report.suggestion}" if report.suggestion else "")
        return Finding("fit", False, detail)
    return Finding("fit", True, f"{report.weights_gib_per_chip:.2f} GiB weights per chip, "
                   f"{report.full_sequences} full-length sequence(s) of KV cache fit")


def node_findings(profile: Profile, *, model_dir: Path, env_dir: Path, set_env: list[str],
                  stack_set: str | None, npu_smi: str | None = None,
                  hashes: bool = False) -> list[Finding]:
    """Every check of this node before ``serve`` starts the profile: the memory fit, the model
    (against its manifest; ``hashes`` re-hashes it), for NPU profiles the chips and the
    ``set_env`` scripts, and the serving environment against the version set ``stack_set``
    (a failed finding without one). Raises :class:`~ascend_serve.stack.matrix.MatrixError`
    when the matrix cannot be read or has no such set."""
    staged = model_dir if model_dir.is_dir() else None
    if profile.device == "npu":
        # One npu-smi read: the chips' health and count, and their HBM for the fit.
        chips = read_chips(npu_smi)
        hbm = None if isinstance(chips, str) else hbm_gib(chips)
        findings = [check_fit(profile, staged, hbm), check_model(model_dir, hashes=hashes),
                    check_npus(profile, npu_smi, chips), check_set_env(set_env)]
    else:
        findings = [check_fit(profile, staged), check_model(model_dir, hashes=hashes)]
    if stack_set:
        matrix = load_matrix()
        stack = resolve(matrix, stack_set)
        findings.append(check_set(profile, stack, matrix))
        findings.append(check_versions(env_dir / "bin" / "python", stack))
    else:
        findings.append(Finding("versions", False, "no version set to check against: pass "
                                "--stack-set (or run the python_env role)"))
    return findings
