"""The ledger: what each role of the collection records in its local facts file, as data.

A role records what it did in ``/etc/ansible/facts.d/<name>.fact`` (JSON), which Ansible reads
back as ``ansible_local.<name>``; ``ascend-serve fleet status``, ``ascend-serve doctor`` and the
roles that follow read it. :data:`LEDGERS` is the one description of those files: the module
``ascend_serve.fleet.ledger`` (the only writer) refuses a record that does not match it, and
``docs/ledger.md`` carries the tables :func:`markdown` renders from it (a test compares them;
``python plugins/module_utils/ledger.py`` prints them).

A ledger entry: ``role`` (the one role that writes it), ``summary``, ``readers`` (who reads it
besides the doctor bundle, which copies every file), ``secret`` (file mode 0600 instead of
0644), and either ``keys`` (the record's keys) or ``entries`` (a record that maps names to
records of the same ``keys``, e.g. one per model). A key: ``type`` (a name of :data:`TYPES`, or
a list of them), ``required`` (default true), ``description``, optionally ``choices`` and, for
a ``dict``, ``keys`` of its own. :func:`_ledger` builds an entry and :func:`_keys` its keys
from one row per key, so the schema below reads as the tables it renders.

Standard library only; runs on managed nodes (Python 3.8+): annotations are not evaluated.
"""

from __future__ import annotations

import json
from typing import Any

#: Bumped when a key changes meaning or type, or a required key is added (not for a new
#: optional key). The readers tolerate missing keys; they are told of a new version in
#: docs/ledger.md.
SCHEMA_VERSION = 1
#: Where Ansible reads local facts from (setup's fact_path default).
FACTS_DIR = "/etc/ansible/facts.d"
#: The handler topic every ledger write notifies (role ascend_serve.fleet.ledger listens to it).
TOPIC = "ascend_serve ledger changed"

#: JSON types by name (bool is not an int here, nor an int a float).
TYPES = {"str": "string", "int": "integer", "bool": "boolean", "list": "array",
         "dict": "object", "null": "null"}

_SET_NAME = "Name of the version set (stack-matrix.yml) "
#: A key's fourth item, for a key a record may leave out.
OPTIONAL = {"required": False}


def _keys(*rows: tuple[Any, ...]) -> dict[str, dict[str, Any]]:
    """Key specs from rows ``(key, type, description)`` or ``(key, type, description, more)``:
    ``type`` is a name of :data:`TYPES` or several joined by ``|``; ``more`` adds ``required``,
    ``choices`` or (for a dict) ``keys``."""
    specs: dict[str, dict[str, Any]] = {}
    for key, kind, description, *more in rows:
        kinds = kind.split("|")
        specs[key] = {"type": kinds if len(kinds) > 1 else kind, "description": description,
                      **(more[0] if more else {})}
    return specs


def _ledger(role: str, summary: str, readers: list[str], keys: dict[str, dict[str, Any]],
            entry: str = "", secret: bool = False) -> dict[str, Any]:
    """A ledger written by ``role``; with ``entry``, a record of one ``keys`` record per
    ``entry`` (e.g. per model)."""
    ledger: dict[str, Any] = {"role": role, "summary": summary, "readers": readers}
    if entry:
        ledger["entries"] = {"name": entry, "keys": keys}
    else:
        ledger["keys"] = keys
    if secret:
        ledger["secret"] = True
    return ledger


LEDGERS: dict[str, dict[str, Any]] = {
    "ascend_preflight": _ledger(
        "preflight",
        "Written once every preflight check passed (a failed preflight writes nothing).",
        [],
        _keys(
            ("passed", "bool", "Always true: the checks passed."),
            ("report", "str", "Path of the JSON report (preflight_report_path)."),
            ("architecture", "str", "ansible_facts.architecture."),
            ("distribution", "str", "ansible_facts.distribution."),
            ("distribution_version", "str", "ansible_facts.distribution_version."),
            ("kernel", "str", "Running kernel release."),
            ("npu_count", "int", "NPUs found on the PCI bus."),
            ("npu_chip", "str", "Chip family checked (preflight_expected_npu_chip)."),
        ),
    ),
    "ascend_os_base": _ledger(
        "os_base",
        "The packages, kernel holds and repositories os_base manages.",
        ["stack_settle (read: the reads it fingerprints at the end of a full run)"],
        _keys(
            ("package_manager", "str", "Package manager of the host.",
             {"choices": ["apt", "dnf"]}),
            ("kernel", "str", "Kernel release the headers and holds are for."),
            ("kernel_headers", "bool", "Kernel headers installed (os_base_kernel_headers)."),
            ("packages", "list", "Packages installed, sorted."),
            ("held", "list", "Kernel packages held, sorted."),
            ("repositories", "list", "Names of the repositories os_base wrote, sorted."),
            ("default_repositories_disabled", "bool",
             "The distribution's own repository files were renamed *.disabled."),
            ("read", "dict", "The arguments the role's state read was given, checked against its "
             "argument spec: the role stack_settle reads with them at the end of a full run "
             "of its play.", OPTIONAL),
        ),
    ),
    "ascend_host_tuning": _ledger(
        "host_tuning",
        "What host_tuning applied, and what it only persisted (with the reason).",
        [
            "host_tuning (the previous run's settings and limits, to remove stale ones)",
            "doctor collector (sysctl keys, jemalloc_path)",
            "doctor (sysctl-drift, sysctl-not-applied, governor-drift)",
        ],
        _keys(
            ("sysctl", "dict", "Kernel settings.", {"keys": _keys(
                ("file", "str", "The sysctl.d file written."),
                ("applied", "dict", "Setting -> value, in effect now."),
                ("persisted_only", "dict",
                 "Setting -> {value, applied: false, reason}: in the file, not in effect."),
            )}),
            ("hugepages", "int", "vm.nr_hugepages asked for (0: left alone)."),
            ("hugepages_reserved", "int|null",
             "Huge pages the kernel reserved; null if not set."),
            ("cpu_governor", "dict", "CPU frequency governor.", {"keys": _keys(
                ("wanted", "str", "host_tuning_cpu_governor ('' leaves it alone)."),
                ("policies", "int", "cpufreq policies found."),
                ("applied", "bool", "Set on every policy now."),
                ("persisted", "bool", "Set again at boot by a systemd unit."),
                ("reason", "str", "Why it was not applied ('' when it was)."),
            )}),
            ("limits_file", "str", "The limits.d file written."),
            ("limits", "list", "PAM limits written (host_tuning_limits)."),
            ("jemalloc_package", "str|null", "jemalloc package installed; null if not wanted."),
            ("jemalloc_path", "str|null",
             "jemalloc library for LD_PRELOAD; null if not wanted."),
            ("read", "dict", "The arguments the role's state read was given, checked against its "
             "argument spec: the role stack_settle reads with them at the end of a full run "
             "of its play.", OPTIONAL),
        ),
    ),
    "ascend_rdma": _ledger(
        "rdma",
        "RDMA devices and ports found, and whether the host meets its requirement.",
        [],
        _keys(
            ("sysfs_path", "str", "Where the devices were read."),
            ("required", "bool", "rdma_required."),
            ("min_active_ports", "int", "rdma_required_min_active_ports."),
            ("active_ports", "int", "Ports in state ACTIVE."),
            ("requirement_met", "bool", "A device and enough ACTIVE ports were found."),
            ("packages", "list", "RDMA packages installed, sorted."),
            ("devices", "list",
             "Devices with their ports, GIDs and RoCE versions (module rdma_facts)."),
        ),
    ),
    "ascend_swap": _ledger(
        "swap",
        "The swap file and whether it is active.",
        ["doctor (swap-inactive, swap-not-applied)"],
        _keys(
            ("size_gb", "int", "Size in GiB (0: no swap file)."),
            ("file", "str", "Path of the swap file."),
            ("priority", "int|null",
             "swapon priority; null for the kernel's default or size 0."),
            ("active", "bool", "Switched on now."),
            ("reason", "str", "Why it is not active; present only when active is false.",
             OPTIONAL),
        ),
    ),
    "ascend_hccl": _ledger(
        "hccl",
        "The HCCL environment written for the serving unit.",
        [
            "vllm_service (the head's env.HCCL_IF_IP, through hostvars)",
            "doctor collector and doctor (env_file)",
        ],
        _keys(
            ("env_file", "str", "The environment file written."),
            ("env", "dict", "Variable -> value, as in the file."),
        ),
    ),
    "ascend_npu_driver": _ledger(
        "npu_driver",
        "Driver and firmware installed, and a pending reboot.",
        [
            "npu_driver (module npu_driver_facts: the pending reboot)",
            "stack_settle (read: the reads it fingerprints at the end of a full run)",
            "rollout (stack_set)",
            "fleet status (stack_set, versions, reboot_pending)",
            "doctor collector (install_path) and doctor (versions, reboot-pending)",
        ],
        _keys(
            ("stack_set", "str", _SET_NAME + "the driver is for."),
            ("driver_version", "str", "Driver installed ('' if none)."),
            ("firmware_version", "str", "Firmware installed ('' if none)."),
            ("install_path", "str", "Driver install path."),
            ("run_user", "str", "The driver's run user."),
            ("reboot_pending", "bool", "A reboot is needed to load what was installed."),
            ("reboot_pending_boot_id", "str",
             "Boot id when the reboot became pending ('' if none); a new boot id clears it."),
            ("read", "dict", "The arguments the role's state read was given, checked against its "
             "argument spec: the role stack_settle reads with them at the end of a full run "
             "of its play.", OPTIONAL),
        ),
    ),
    "ascend_npu_network": _ledger(
        "npu_network",
        "The device NIC plan of this host, once configured and verified.",
        ["doctor collector (conf, devices)"],
        _keys(
            ("conf", "str", "Path of hccn.conf written."),
            ("chip", "str", "Chip family of the plan."),
            ("index", "int", "Host index in the fleet's plan."),
            ("tls", "bool", "TLS enabled on the device NICs."),
            ("devices", "list", "Per device: device, address, netmask, gateway, netdetect."),
        ),
    ),
    "ascend_cann": _ledger(
        "cann",
        "The CANN installed and the environment a service must source.",
        [
            "rollout (stack_set)",
            "vllm_service (set_env)",
            "ascend-serve serve and tune (set_env)",
            "fleet status (stack_set, version)",
            "doctor collector (toolkit_root, profile_script, env_file) and doctor",
            "stack_settle (read: the reads it fingerprints at the end of a full run)",
        ],
        _keys(
            ("stack_set", "str", _SET_NAME + "CANN is from."),
            ("version", "str", "CANN version."),
            ("toolkit_root", "str", "The toolkit's versioned directory."),
            ("nnal", "bool", "NNAL (ATB) installed."),
            ("set_env", "list", "Scripts a service must source, in order."),
            ("profile_script", "str", "profile.d script for login shells."),
            ("env_file", "str", "The same environment as KEY=value for systemd."),
            ("read", "dict", "The arguments the role's state read was given, checked against its "
             "argument spec: the role stack_settle reads with them at the end of a full run "
             "of its play.", OPTIONAL),
        ),
    ),
    "ascend_stack_settled": _ledger(
        "stack_settle",
        "The roles of stack.yml and serving_env.yml a full run left settled, each with its "
        "fingerprint, and the reads that answered.",
        ["stack.yml and serving_env.yml (their first task, module stack_state: the roles to "
         "enter)"],
        _keys(
            ("roles", "dict", "Role name to the fingerprint of its code, inputs, facts, ledger and "
             "read answers at the end of the run (plugins/plugin_utils/settle.py)."),
            ("reads", "dict", "Module name to the arguments of the state read that answered: "
             "stack.yml's first task reads the same."),
        ),
    ),
    "ascend_python_env": _ledger(
        "python_env",
        "The serving Python environment and its locked packages.",
        [
            "rollout (stack_set)",
            "vllm_service (prefix, stack_set)",
            "ascend-serve serve and tune (python)",
            "fleet status (stack_set, packages)",
            "doctor collector (python, packages) and doctor",
        ],
        _keys(
            ("stack_set", "str", _SET_NAME + "of the environment."),
            ("platform", "str", "The set's platform (ascend, cpu)."),
            ("manager", "str", "python_env_manager.", {"choices": ["venv", "conda"]}),
            ("prefix", "str", "The environment's prefix."),
            ("python", "str", "Its interpreter."),
            ("python_version", "str", "Python X.Y."),
            ("packages", "dict", "Distribution -> version, as locked."),
            ("read", "dict", "The arguments the role's state read was given, checked against its "
             "argument spec: the role stack_settle reads with them at the end of a full run "
             "of its play.", OPTIONAL),
        ),
    ),
    "ascend_model_store": _ledger(
        "model_store",
        "The models staged on this host, one entry per model (kept across runs).",
        ["fleet status (complete)"],
        _keys(
            ("dir", "str", "The model directory."),
            ("files", "int", "Files in the manifest."),
            ("bytes", "int", "Their total size."),
            ("complete", "bool", "Every file present and verified."),
        ),
        entry="model_store_name",
    ),
    "ascend_vllm_service": _ledger(
        "vllm_service",
        "The vLLM server this host runs (or takes part in).",
        [
            "rollout (unit, runtime, image)",
            "fleet status and the fleet_status playbook (profile, role, url, unit, runtime, image)",
            "doctor collector (unit, launcher) and doctor",
        ],
        _keys(
            ("profile", "str", "Serving profile."),
            ("served_name", "str", "Model name the API serves."),
            ("role", "str", "head (rank 0, serves the API) or headless.",
             {"choices": ["head", "headless"]}),
            ("rank", "int", "Node rank in the profile's group."),
            ("unit", "str", "systemd unit."),
            ("url", "str", "API base URL ('' on a headless node)."),
            ("launcher", "str", "Launcher script the unit runs."),
            ("model_dir", "str", "Model directory served."),
            ("api_key", "bool", "An API key is required (never the key)."),
            ("runtime", "str", "venv or container (vllm_service_runtime).",
             {"required": False, "choices": ["venv", "container"]}),
            ("image", "str", "Image a container runtime serves ('' for venv).", OPTIONAL),
        ),
    ),
    "ascend_k8s_node": _ledger(
        "k8s_node",
        "The Ascend Docker Runtime, containerd's configuration and the node labels of a "
        "Kubernetes worker.",
        [],
        _keys(
            ("runtime_version", "str", "Ascend Docker Runtime release installed."),
            ("runtime_dir", "str", "Its install directory (<install path>/Ascend-Docker-Runtime)."),
            ("containerd_config", "str", "containerd's config.toml the role writes."),
            ("default_runtime", "str", "containerd's default runtime handler (ascend or runc)."),
            ("kubelet_env_file", "str", "The kubelet environment file holding --node-labels."),
            ("labels", "dict", "Node label -> value, as passed to kubelet."),
        ),
    ),
    "ascend_rollout": _ledger(
        "rollout",
        "Where an upgrade (playbook upgrade.yml) left this host.",
        ["rollout (an unfinished upgrade)", "fleet status (phase, set, to_set, to_image)"],
        _keys(
            ("phase", "str", "draining and upgrading: out of the load balancer.",
             {"choices": ["draining", "upgrading", "done"]}),
            ("from_set", "str", "Set before the upgrade (draining, upgrading).", OPTIONAL),
            ("to_set", "str", "Set being installed (draining, upgrading).", OPTIONAL),
            ("set", "str", "Set installed and validated (done).", OPTIONAL),
            ("from_image", "str", "Image served before the upgrade, for a container runtime "
             "(draining, upgrading).", OPTIONAL),
            ("to_image", "str", "Image being rolled out, for a container runtime "
             "(draining, upgrading).", OPTIONAL),
        ),
    ),
    "ascend_faults": _ledger(
        "preflight",
        "Each chip fault npu-smi reported (ascend_serve.fleet.npu_faults), its class and lifetime, "
        "and what preflight did about it (written whether the host was refused or not).",
        ["preflight (the lifetime of a fault)", "vllm_service (RestartBusiness)",
         "k8s_node (the NoSchedule taint)", "fleet status (worst)"],
        _keys(
            ("worst", "str|null", "The host's worst class now (null: no fault)."),
            ("blocking", "list", "Codes (npu/chip/code) that kept the host out of service."),
            ("action", "str", "What preflight did: none, or refused (drained, not put into "
             "service).", {"choices": ["none", "refused"]}),
            ("faults", "dict", "Fault lifetime by npu/chip/code: npu, chip, code, class, state "
             "(present, cleared), first_seen, cleared_at (UTC; empty while present)."),
        ),
    ),
    "ascend_fault_restarts": _ledger(
        "vllm_service",
        "The vLLM unit's restarts for RestartBusiness-class faults (the rate limit's history).",
        ["vllm_service (the rate limit)"],
        _keys(
            ("restarts", "list", "UTC times of the restarts within the rate limit's window."),
            ("codes", "list", "The codes (npu/chip/code) of the last restart."),
        ),
    ),
}


class LedgerError(ValueError):
    """A record the schema refuses, or a ledger it does not know."""


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return type(value).__name__


def _types(spec: dict[str, Any]) -> list[str]:
    kind = spec["type"]
    return list(kind) if isinstance(kind, (list, tuple)) else [kind]


def _check(record: Any, keys: dict[str, dict[str, Any]], where: str) -> list[str]:
    if not isinstance(record, dict):
        return [f"{where} must be an object, got {_type_name(record)}"]
    problems = []
    missing = [k for k, spec in keys.items() if spec.get("required", True) and k not in record]
    if missing:
        problems.append(f"{where}: missing required key(s) {', '.join(missing)}")
    unknown = sorted(str(k) for k in record if k not in keys)
    if unknown:
        problems.append(f"{where}: unknown key(s) {', '.join(unknown)} (not in the schema; "
                        "add them to module_utils/ledger.py and docs/ledger.md first)")
    for key in sorted(k for k in record if k in keys):
        spec, value = keys[key], record[key]
        found = _type_name(value)
        if found not in _types(spec):
            problems.append(f"{where}.{key} must be {' or '.join(_types(spec))}, got {found} "
                            f"{json.dumps(value, default=repr)[:60]}")
        elif spec.get("choices") and value not in spec["choices"]:
            problems.append(f"{where}.{key} must be one of {', '.join(spec['choices'])}, "
                            f"got {value!r}")
        elif found == "dict" and spec.get("keys"):
            problems += _check(value, spec["keys"], f"{where}.{key}")
    return problems


def validate(name: str, role: str, record: Any) -> None:
    """Raise :class:`LedgerError` listing every way ``record`` does not fit ledger ``name``."""
    ledger = LEDGERS.get(name)
    if ledger is None:
        raise LedgerError(f"unknown ledger {name!r}; known: {', '.join(sorted(LEDGERS))}")
    if role != ledger["role"]:
        raise LedgerError(f"ledger {name} is written by role {ledger['role']}, not {role!r}")
    if "entries" in ledger:
        if not isinstance(record, dict):
            problems = [f"{name} must be an object, got {_type_name(record)}"]
        else:
            problems = []
            for entry in sorted(record):
                problems += _check(record[entry], ledger["entries"]["keys"], f"{name}.{entry}")
    else:
        problems = _check(record, ledger["keys"], name)
    try:
        dumps(record)
    except (TypeError, ValueError) as exc:
        problems.append(f"{name} is not plain JSON: {exc}")
    if problems:
        raise LedgerError(f"refused record for ledger {name} (schema version {SCHEMA_VERSION}, "
                          "docs/ledger.md): " + "; ".join(problems))


def dumps(record: Any) -> str:
    """The file's text: the same bytes Ansible's to_nice_json(indent=2) gives, plus a newline."""
    return json.dumps(record, indent=2, sort_keys=True, separators=(",", ": "),
                      allow_nan=False) + "\n"


def canonical(record: Any) -> str:
    """A comparable form: equal only for equal JSON (true is not 1, 1 is not 1.0)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def fact_path(name: str, facts_dir: str = FACTS_DIR) -> str:
    return facts_dir.rstrip("/") + "/" + name + ".fact"


def key_rows(name: str) -> list[tuple[str, dict[str, Any]]]:
    """(dotted key, spec) of every documented key of a ledger, nested keys after their parent;
    an entries ledger's keys are under ``<entry>.``."""
    ledger = LEDGERS[name]
    rows: list[tuple[str, dict[str, Any]]] = []

    def walk(keys: dict[str, dict[str, Any]], prefix: str) -> None:
        for key, spec in keys.items():
            rows.append((prefix + key, spec))
            if spec.get("keys"):
                walk(spec["keys"], prefix + key + ".")

    if "entries" in ledger:
        walk(ledger["entries"]["keys"], "<" + ledger["entries"]["name"] + ">.")
    else:
        walk(ledger["keys"], "")
    return rows


def markdown() -> str:
    """The per-ledger tables of docs/ledger.md (between its generated-section markers)."""
    out = [f"Schema version {SCHEMA_VERSION}. Handler topic: `{TOPIC}`.", ""]
    for name in sorted(LEDGERS):
        ledger = LEDGERS[name]
        mode = "0600" if ledger.get("secret") else "0644"
        out += [f"### `{name}`", "",
                f"Written by role `{ledger['role']}` to `{fact_path(name)}` (mode {mode}), "
                f"read back as `ansible_local.{name}`. {ledger['summary']}", ""]
        if "entries" in ledger:
            out += [f"One entry per `{ledger['entries']['name']}`, each with these keys.", ""]
        readers = ledger["readers"]
        out += ["Read by: " + ("; ".join(readers) if readers else "the doctor bundle only") + ".",
                ""]
        out += ["| Key | Type | Required | Meaning |", "| --- | --- | --- | --- |"]
        for key, spec in key_rows(name):
            kind = " or ".join(_types(spec))
            if spec.get("choices"):
                kind += ": " + ", ".join(spec["choices"])
            required = "yes" if spec.get("required", True) else "no"
            out.append(f"| `{key}` | {kind} | {required} | {spec['description']} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
