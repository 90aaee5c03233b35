"""Elastic scaling of a rendered workload on vLLM's own load metrics.

Two ways, the same metrics (:mod:`ascend_serve.serving.load_metrics`) and the same pace:

- ``hpa``: a HorizontalPodAutoscaler (``autoscaling/v2``) with ``Pods`` metrics read through
  prometheus-adapter's custom metrics API, plus a ConfigMap holding the adapter rules that expose
  vLLM's gauges there (kubernetes-sigs/prometheus-adapter ``docs/config.md``: ``seriesQuery``,
  ``resources.overrides``, ``name.matches``/``as``, ``metricsQuery``). vLLM's names hold ``:``;
  the rules expose them as ``vllm_<name>``.
- ``keda``: a KEDA ScaledObject (``keda.sh/v1alpha1``, CRD ``keda.sh_scaledobjects.yaml`` @
  kedacore/keda v2.19.0) with one ``prometheus`` trigger per metric (keda.sh docs, Prometheus
  scaler: ``serverAddress``, ``query``, ``threshold``), the HPA behaviour below under
  ``advanced.horizontalPodAutoscalerConfig``.

The target is the workload itself (:class:`WorkloadRef`): a Deployment, or a LeaderWorkerSet
through its scale subresource (kubernetes-sigs/lws CRD @ v0.10.0: ``specReplicasPath
.spec.replicas``, ``labelSelectorPath .status.hpaPodSelector``, which selects the leaders, the
pods serving the API and its ``/metrics``). One call per workload: a prefill/decode render calls
:func:`objects` once per role, each role scaling on its own series.

Pace: a replica costs a model load (the profile's ``health_timeout_s``, the budget the startup
probe and ``VLLM_ENGINE_READY_TIMEOUT_S`` give it). Scale-up adds at most one replica per load
(a ``Pods`` policy of 1 per ``periodSeconds`` = the load), so a queue that persists while the new
replica loads orders no second one; scale-down waits for the load metrics to stay low for twice a
load (the stabilisation window) and removes one replica per load. The API server caps a policy's
period at 1800 s and a window at 3600 s (kubernetes/kubernetes
``pkg/apis/autoscaling/validation/validation.go``: ``MaxPeriodSeconds``,
``MaxStabilizationWindowSeconds``): DeepSeek's 3600 s loads get those caps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ascend_serve.serving.load_metrics import METRICS

Autoscaler = Literal["hpa", "keda"]
AUTOSCALERS: tuple[Autoscaler, ...] = ("hpa", "keda")
HPA_API = "autoscaling/v2"
KEDA_API = "keda.sh/v1alpha1"
MAX_PERIOD_S = 1800
MAX_WINDOW_S = 3600
# Load metrics above target for this long before a replica is ordered: a burst between two
# scrapes orders nothing.
SCALE_UP_WINDOW_S = 180
ADAPTER_CONFIG_KEY = "config.yaml"
# Where KEDA asks Prometheus (prometheus-operator's default Service of a Prometheus named
# "k8s" in "monitoring", as kube-prometheus deploys it); --prometheus-url names another.
DEFAULT_PROMETHEUS_URL = "http://prometheus-k8s.monitoring.svc:9090"


@dataclass(frozen=True)
class WorkloadRef:
    """What scales: the object's API, kind and name, and what its replicas cost."""

    api_version: str
    kind: str
    name: str
    namespace: str
    labels: Mapping[str, str]
    served_model_name: str  # vLLM's model_name label on its metrics
    load_s: int  # a replica's model load budget

    @classmethod
    def of(cls, workload: Mapping[str, Any], served_model_name: str, load_s: int
           ) -> WorkloadRef:
        """The reference of a rendered Deployment or LeaderWorkerSet."""
        meta = workload["metadata"]
        return cls(api_version=workload["apiVersion"], kind=workload["kind"], name=meta["name"],
                   namespace=meta["namespace"], labels=dict(meta.get("labels", {})),
                   served_model_name=served_model_name, load_s=load_s)


@dataclass(frozen=True)
class ScaleSpec:
    min_replicas: int
    max_replicas: int
    targets: Mapping[str, float]
    autoscaler: Autoscaler = "hpa"
    prometheus_url: str = DEFAULT_PROMETHEUS_URL


def _quantity(value: float) -> str:
    """A Kubernetes quantity: whole numbers as such, fractions in milli-units."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def behavior(load_s: int) -> dict[str, Any]:
    """HPA scaling rules paced by one model load (module docstring)."""
    period = max(1, min(load_s, MAX_PERIOD_S))
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": min(SCALE_UP_WINDOW_S, MAX_WINDOW_S),
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": period}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": min(2 * load_s, MAX_WINDOW_S),
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": period}],
        },
    }


def adapter_metric_name(key: str) -> str:
    """The custom-metrics API name of a vLLM gauge: ``vllm:num_requests_waiting`` ->
    ``vllm_num_requests_waiting``."""
    return METRICS[key].series.replace(":", "_")


def adapter_rules(targets: Mapping[str, float]) -> dict[str, Any]:
    """prometheus-adapter rules exposing the gauges per pod (engines combined as the metric
    says: a replica's queue is the sum, its KV cache the fullest engine)."""
    rules = []
    for key in targets:
        spec = METRICS[key]
        rules.append({
            "seriesQuery": f'{spec.series}{{namespace!="",pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                        "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{spec.series}$", "as": adapter_metric_name(key)},
            "metricsQuery": f"{spec.per_replica}(<<.Series>>{{<<.LabelMatchers>>}}) "
                            "by (<<.GroupBy>>)",
        })
    return {"rules": rules}


def _meta(ref: WorkloadRef, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": ref.namespace, "labels": dict(ref.labels)}


def _target_ref(ref: WorkloadRef) -> dict[str, str]:
    return {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}


def horizontal_pod_autoscaler(ref: WorkloadRef, spec: ScaleSpec) -> dict[str, Any]:
    metrics = [{
        "type": "Pods",
        "pods": {"metric": {"name": adapter_metric_name(key)},
                 "target": {"type": "AverageValue", "averageValue": _quantity(value)}},
    } for key, value in spec.targets.items()]
    return {
        "apiVersion": HPA_API,
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(ref, ref.name),
        "spec": {
            "scaleTargetRef": _target_ref(ref),
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "metrics": metrics,
            "behavior": behavior(ref.load_s),
        },
    }


def adapter_configmap(ref: WorkloadRef, spec: ScaleSpec, dump: Any) -> dict[str, Any]:
    """The adapter rules as a ConfigMap (``config.yaml``, the file the adapter's ``--config``
    reads); ``dump`` turns the rules into YAML text."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(ref, f"{ref.name}-prometheus-adapter"),
        "data": {ADAPTER_CONFIG_KEY: dump(adapter_rules(spec.targets))},
    }


def keda_query(ref: WorkloadRef, key: str) -> str:
    """The total over the workload's replicas (KEDA's ``AverageValue`` divides it by the
    replicas) for the queue; the mean of the replicas' fullest engines for the KV cache."""
    spec = METRICS[key]
    selector = f'namespace="{ref.namespace}",model_name="{ref.served_model_name}"'
    if spec.per_replica == "sum":
        return f"sum({spec.series}{{{selector}}})"
    return f"avg(max by (pod) ({spec.series}{{{selector}}}))"


def scaled_object(ref: WorkloadRef, spec: ScaleSpec) -> dict[str, Any]:
    triggers = []
    for key, value in spec.targets.items():
        per_replica_total = METRICS[key].per_replica == "sum"
        triggers.append({
            "type": "prometheus",
            "name": key.replace("_", "-"),
            "metricType": "AverageValue" if per_replica_total else "Value",
            "metadata": {"serverAddress": spec.prometheus_url,
                         "query": keda_query(ref, key),
                         "threshold": f"{value:g}"},
        })
    return {
        "apiVersion": KEDA_API,
        "kind": "ScaledObject",
        "metadata": _meta(ref, ref.name),
        "spec": {
            "scaleTargetRef": _target_ref(ref),
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior(ref.load_s)}},
            "triggers": triggers,
        },
    }


def hand_over(workload: dict[str, Any]) -> None:
    """Leave the replica count to the autoscaler: drop ``spec.replicas`` from the workload, so that
    re-applying the manifests does not reset what the autoscaler chose (Kubernetes docs,
    "Horizontal Pod Autoscaling", migrating Deployments to horizontal autoscaling). Both kinds
    default to one replica when it is absent."""
    workload["spec"].pop("replicas", None)


def objects(ref: WorkloadRef, spec: ScaleSpec, dump: Any) -> list[dict[str, Any]]:
    """The autoscaling objects of one workload (one role of a prefill/decode render)."""
    if spec.autoscaler == "keda":
        return [scaled_object(ref, spec)]
    return [adapter_configmap(ref, spec, dump), horizontal_pod_autoscaler(ref, spec)]
