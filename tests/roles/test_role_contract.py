"""The contract every role of the collection keeps, checked over every role: a README; options
declared in meta/argument_specs.yml, prefixed with the role's name, described, and matching
defaults/main.yml; every other name private (_<role>_*); no trace of the test setup, of a fixed
architecture or of a repository host; per-OS vars picked by a first_found chain from the most
specific file to the most general one.

Where a role breaks a rule that was not checked on it before, EXCEPTIONS names the rule, the
role, the option, name or file, and why."""

from __future__ import annotations

import re
from typing import Any

import pytest
import role_files
from paths import ROLES

ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if p.is_dir())
SPEC_TYPES: dict[str, type | tuple[type, ...]] = {
    "list": list, "bool": bool, "int": int, "str": str, "dict": dict, "path": str,
}
SECRET = re.compile(r"api_key|password|token|secret")
TEST_SETUP_WORDS = ("ascend_sim", "simulat", "molecule", "pytest", "podman", r"\btests?\b",
                    "/srv/")
# A word of the test setup that is also what a role deploys: role -> (word, why).
PRODUCT_WORDS = {
    "vllm_service": ("podman", "the container engine of vllm_service_runtime: container"),
}
ARCHITECTURE = re.compile(r"x86_64|aarch64|amd64|arm64")
# What an example may name instead of a real repository host (os_base's defaults/main.yml).
EXAMPLE_HOSTS = {"m.example"}

# Where a role breaks a rule that was not checked on it before: (rule, role, what) -> why.
# "default": an option whose default in defaults/main.yml the spec does not state (or states
# otherwise); "declared": a public name of the role's prefix that is no option; "register": a
# public registered name; "tests", "architecture": a file that names the test setup, or writes
# an architecture outside a comment.
EXCEPTIONS = {
    ("declared", "ascend_installer", "ascend_installer_step"): "the loop_var of tasks/run.yml",
    ("declared", "ascend_stack", "ascend_stack_resolved"): "the fact it sets: the resolved set",
    ("declared", "hccl", "hccl_ranktable_content"): "the fact it sets: the rank table",
    ("declared", "model_store", "model_store_result"): "what it registers, read after the role",
    ("declared", "npu_network", "npu_network_plan"): "the fact it sets: the fleet's plan",
    ("declared", "npu_network", "npu_network_ping_matrix"): "the fact it sets: the ping matrix",
    ("declared", "rdma", "rdma_facts"): "the module's name, in a comment of vars/main.yml",
    ("declared", "rdma", "rdma_devices"): "the fact the rdma_facts module returns",
    ("register", "model_store", "model_store_result"): "the staging result, read after the role",
    ("tests", "cann", "vars/main.yml"): "a comment cites a sample of tests/data/corpus",
    ("tests", "preflight", "defaults/main.yml"): "comments: test inventories add x86_64, Debian",
    ("tests", "python_env", "defaults/main.yml"): "a comment: an x86_64 test host, the simulated",
    ("tests", "rdma", "meta/argument_specs.yml"): "a description: a captured or simulated tree",
    ("architecture", "npu_driver", "meta/argument_specs.yml"): "a description: aarch64 on Kunpeng",
    ("architecture", "preflight", "defaults/main.yml"): "allowed architectures: aarch64",
    ("architecture", "preflight", "meta/argument_specs.yml"): "allowed architectures: aarch64",
}


def _texts(role: str, suffixes: tuple[str, ...] = (".yml", ".j2")) -> dict[str, str]:
    """The role's files of those suffixes, by their path in the role."""
    root = ROLES / role
    return {p.relative_to(root).as_posix(): p.read_text()
            for p in sorted(root.rglob("*")) if p.suffix in suffixes and p.is_file()}


def _excepted(rule: str, role: str) -> set[str]:
    return {what for r, name, what in EXCEPTIONS if (r, name) == (rule, role)}


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def test_every_role_is_checked() -> None:
    assert {"host_tuning", "os_base", "rollout", "swap", "vllm_service"} <= set(ROLE_NAMES)
    assert len(ROLE_NAMES) >= 15, ROLE_NAMES


@pytest.mark.parametrize(("rule", "role", "what"), sorted(EXCEPTIONS))
def test_exceptions_name_what_is_there(rule: str, role: str, what: str) -> None:
    """An exception that no longer matches an option, a name or a file is dropped, not kept."""
    if rule == "default":  # the spec still states another default than defaults/main.yml
        assert what in role_files.options(role)
        assert role_files.options(role)[what].get("default") != role_files.defaults(role)[what]
    elif rule in ("declared", "register"):
        assert re.search(rf"(?<![\w.]){what}\b", "\n".join(_texts(role).values()))
    else:
        assert (ROLES / role / what).is_file()


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_role_has_a_readme(role: str) -> None:
    readme = ROLES / role / "README.md"
    assert readme.is_file() and readme.read_text().strip(), role


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_options_are_prefixed_and_described(role: str) -> None:
    for name, spec in role_files.options(role).items():
        assert name.startswith(f"{role}_"), name
        assert spec.get("description"), name
        assert spec["type"] in SPEC_TYPES, name


def test_secret_options_are_no_log() -> None:
    secret = {name: spec for role in ROLE_NAMES
              for name, spec in role_files.options(role).items() if SECRET.search(name)}
    assert "vllm_service_api_key" in secret, sorted(secret)
    assert all(spec.get("no_log") is True for spec in secret.values()), secret


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_defaults_match_argument_specs(role: str) -> None:
    """Every default is an option, every option has a default or is required, and the spec
    states the default (a template it may leave out; a required option it cannot have)."""
    defaults, options = role_files.defaults(role), role_files.options(role)
    required = {name for name, spec in options.items() if spec.get("required")}
    assert set(defaults) <= set(options), set(defaults) - set(options)
    assert set(options) - set(defaults) <= required, set(options) - set(defaults) - required
    for name, value in defaults.items():
        spec = options[name]
        if name in required:  # defaults/main.yml's value is a placeholder
            assert "default" not in spec, name
        elif name not in _excepted("default", role):
            stated = spec.get("default", value) if _is_template(value) else spec.get("default")
            assert stated == value, name
        if value is not None and not _is_template(value):
            assert isinstance(value, SPEC_TYPES[spec["type"]]), name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_variable_is_declared_or_private(role: str) -> None:
    """Public names used in the role are declared; registered and vars-file names are private.
    (A YAML anchor or alias, &name or *name, is no variable.)"""
    text = "\n".join(_texts(role).values())
    used = set(re.findall(rf"(?<![\w.&*])({role}_\w+)", text))
    declared = set(role_files.options(role)) | _excepted("declared", role)
    assert used <= declared, used - declared
    registered = set(re.findall(r"register: (\w+)", text))
    public = {r for r in registered if not r.startswith(f"_{role}_")}
    assert public <= _excepted("register", role), public
    for path in (ROLES / role / "vars").glob("*.yml"):
        assert all(k.startswith(f"_{role}_") for k in role_files.load(path)), path.name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_role_knows_nothing_of_its_tests(role: str) -> None:
    """Tasks, vars, defaults, handlers, templates and meta never refer to the test setup."""
    own = PRODUCT_WORDS.get(role, ("", ""))[0]
    setup = re.compile("|".join(w for w in TEST_SETUP_WORDS if w != own), re.IGNORECASE)
    for name, text in _texts(role).items():
        if name not in _excepted("tests", role):
            hits = [line for line in text.splitlines() if setup.search(line)]
            assert not hits, f"{name}: {hits}"


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_no_fixed_architecture(role: str) -> None:
    """Production hosts are aarch64: no architecture is written into the role's values."""
    for name, text in _texts(role, (".yml",)).items():
        if name not in _excepted("architecture", role):
            code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
            assert not ARCHITECTURE.search("\n".join(code)), name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_no_hard_coded_repository_hosts(role: str) -> None:
    text = "\n".join(t for n, t in _texts(role, (".yml",)).items()
                     if n != "meta/argument_specs.yml")
    hosts = set(re.findall(r"https?://([\w.-]+)", text))
    assert hosts <= EXAMPLE_HOSTS, hosts


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_first_found_chains_list_specific_to_general(role: str) -> None:
    """A role with per-OS vars files loads them through a first_found chain, most specific
    first; the tests resolve the chain with role_files.os_vars_file."""
    chains = [task["vars"][f"_{role}_vars_candidates"]["files"]
              for path in sorted((ROLES / role / "tasks").glob("*.yml"))
              for task in role_files.tasks(role_files.load(path) or [])
              if "first_found" in str(task.get("ansible.builtin.include_vars", ""))]
    assert all(files == role_files.os_vars_candidates(role) for files in chains), chains
    per_os = [p for p in (ROLES / role / "vars").glob("*.yml") if p.name != "main.yml"]
    assert bool(chains) == bool(per_os), (chains, per_os)


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_distribution_file_defines_what_its_family_files_do(role: str) -> None:
    """first_found loads one file: a distribution's own file (Kylin's) replaces its family's
    (RedHat.yml) and must define every key the family files all define."""
    vars_dir = ROLES / role / "vars"
    families = [role_files.load(vars_dir / f"{f}.yml") for f in ("Debian", "RedHat")
                if (vars_dir / f"{f}.yml").is_file()]
    if not families:
        return
    shared = set.intersection(*(set(f) for f in families))
    for path in vars_dir.glob("*.yml"):
        if path.name != "main.yml":
            assert set(role_files.load(path)) >= shared, path.name
