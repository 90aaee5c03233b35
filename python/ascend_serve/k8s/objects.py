"""The Kubernetes objects of a :class:`~ascend_serve.k8s.plan.RenderPlan`, as plain data.

- ConfigMap ``<name>-launch``: the launchers (``launch-<rank>.sh``), mounted where the
  vllm_service role keeps its launcher (``/etc/ascend-serve/vllm``);
- ConfigMap ``<name>-ranktable`` (when there is a rank table): ``hccl.json``, mounted where
  MindCluster mounts a job's rank table, its path in ``RANK_TABLE_FILE``;
- a single-node profile: a Deployment (one replica, ``Recreate``: a second pod would need a
  second set of NPUs); a multi-node profile: a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``)
  of one group of ``nodes`` pods, the leader running the head launcher (API server) and each
  worker the headless launcher of its ``LWS_WORKER_INDEX``, joining through the leader's address
  (vLLM's ``--data-parallel-address``), as ``vllm_service`` places head and headless nodes;
  ``restartPolicy: RecreateGroupOnPodRestart`` (vLLM's own LWS guide, vllm-project/vllm
  ``docs/deployment/frameworks/lws.md``): one lost rank stops the whole data-parallel group;
- a Service ``<name>`` in front of the head's API port (selecting the leader, like vllm-ascend's
  CI manifest ``tests/e2e/nightly/multi_node/scripts/lws.yaml.jinja2`` @ v0.13.0).

Probes (the head only: a headless node serves no HTTP) ask vLLM's ``/health``, the endpoint
``ascend-serve serve`` and the vllm_service role wait for: a startup probe that allows the
profile's ``health_timeout_s`` (the launcher gives the engine the same budget in
``VLLM_ENGINE_READY_TIMEOUT_S``), then readiness every 10 s and liveness every 30 s.

The worker's command names its launcher through ``$(LWS_WORKER_INDEX)``: the kubelet expands
``$(VAR)`` references in ``command`` from the container's environment (Kubernetes API,
``io.k8s.api.core.v1.Container.command``), and LWS puts ``LWS_WORKER_INDEX`` there.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ascend_serve.k8s import ascend
from ascend_serve.k8s.plan import API_KEY_ENV, LAUNCH_DIR, STATE_DIR, RenderPlan

CONTAINER = "vllm"
PORT_NAME = "http"
PROBE_PERIOD_S = 10
# What the vllm_service role's unit gives vLLM to stop (vllm_service_stop_timeout).
STOP_GRACE_S = 60
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


def _labels(plan: RenderPlan) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": plan.name,
        "app.kubernetes.io/managed-by": "ascend-serve",
        "ascend-serve/profile": plan.profile.name,
    }


def _selector(plan: RenderPlan) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": plan.name}


def _meta(plan: RenderPlan, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": plan.options.namespace, "labels": _labels(plan)}


def launch_configmap(plan: RenderPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(plan, f"{plan.name}-launch"),
        "data": {f"launch-{rank}.sh": script for rank, script in sorted(plan.launchers.items())},
    }


def ranktable_configmap(plan: RenderPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(plan, f"{plan.name}-ranktable"),
        "data": {ascend.RANKTABLE_FILE: json.dumps(plan.ranktable, indent=2) + "\n"},
    }


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT_NAME}, "periodSeconds": period,
            "timeoutSeconds": 5, "failureThreshold": failures}


def _volumes(plan: RenderPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts."""
    opts = plan.options
    volumes: list[dict[str, Any]] = [
        {"name": "launch", "configMap": {"name": f"{plan.name}-launch"}},
        {"name": "state", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "launch", "mountPath": LAUNCH_DIR, "readOnly": True},
        {"name": "state", "mountPath": STATE_DIR},
        {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - the pod's shared memory
    ]
    if opts.model_pvc:
        volumes.append({"name": "model", "persistentVolumeClaim": {
            "claimName": opts.model_pvc, "readOnly": True}})
        mount: dict[str, Any] = {"name": "model", "mountPath": plan.model_dir, "readOnly": True}
        if opts.model_subpath:
            mount["subPath"] = opts.model_subpath
        mounts.append(mount)
    else:
        volumes.append({"name": "model", "hostPath": {
            "path": opts.model_host_path or plan.model_dir, "type": "Directory"}})
        mounts.append({"name": "model", "mountPath": plan.model_dir, "readOnly": True})
    if plan.ranktable is not None:
        volumes.append({"name": "ranktable", "configMap": {"name": f"{plan.name}-ranktable"}})
        mounts.append({"name": "ranktable", "mountPath": ascend.RANKTABLE_DIR, "readOnly": True})
    for host in ascend.HOST_MOUNTS:
        volumes.append({"name": host.name, "hostPath": {"path": host.path, "type": host.type}})
        mounts.append({"name": host.name, "mountPath": host.path, "readOnly": True})
    for index, path in enumerate(opts.env_files):
        volumes.append({"name": f"env-file-{index}", "hostPath": {"path": path, "type": "File"}})
        mounts.append({"name": f"env-file-{index}", "mountPath": path, "readOnly": True})
    return volumes, mounts


def _pod_spec(plan: RenderPlan, launch: str, head: bool) -> dict[str, Any]:
    profile = plan.profile
    volumes, mounts = _volumes(plan)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", f"{LAUNCH_DIR}/{launch}"],
        "resources": {"limits": {ascend.NPU_RESOURCE: profile.chips_per_node}},
        "volumeMounts": mounts,
    }
    env: list[dict[str, Any]] = []
    if plan.ranktable is not None:
        env.append({"name": ascend.RANKTABLE_ENV,
                    "value": f"{ascend.RANKTABLE_DIR}/{ascend.RANKTABLE_FILE}"})
    if plan.options.api_key_secret:
        # As the unit's EnvironmentFile: in vLLM's environment, never on its command line.
        env.append({"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {
            "name": plan.options.api_key_secret, "key": API_KEY_ENV}}})
    if env:
        container["env"] = env
    if head:
        container["ports"] = [{"name": PORT_NAME, "containerPort": profile.port,
                               "protocol": "TCP"}]
        container["startupProbe"] = _probe(
            "/health", PROBE_PERIOD_S, math.ceil(profile.health_timeout_s / PROBE_PERIOD_S))
        container["readinessProbe"] = _probe("/health", PROBE_PERIOD_S, 3)
        container["livenessProbe"] = _probe("/health", 30, 3)
    spec: dict[str, Any] = {
        "containers": [container],
        "nodeSelector": ascend.node_selector(profile.chip),
        "terminationGracePeriodSeconds": STOP_GRACE_S,
        "volumes": volumes,
    }
    if plan.options.host_network:
        spec["hostNetwork"] = True
        # Cluster DNS (the leader's address) for a pod on the host's network.
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return spec


def deployment(plan: RenderPlan) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(plan, plan.name),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _selector(plan)},
            "template": {
                "metadata": {"labels": _labels(plan)},
                "spec": _pod_spec(plan, "launch-0.sh", head=True),
            },
        },
    }


def leaderworkerset(plan: RenderPlan) -> dict[str, Any]:
    leader_labels = {**_labels(plan), "role": "leader"}
    worker_labels = {**_labels(plan), "role": "worker"}
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _meta(plan, plan.name),
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": plan.profile.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": leader_labels},
                    "spec": _pod_spec(plan, "launch-0.sh", head=True),
                },
                "workerTemplate": {
                    "metadata": {"labels": worker_labels},
                    "spec": _pod_spec(plan, f"launch-$({ascend.LWS_WORKER_INDEX}).sh",
                                      head=False),
                },
            },
        },
    }


def service(plan: RenderPlan) -> dict[str, Any]:
    selector = ({LWS_NAME_LABEL: plan.name, "role": "leader"} if plan.multi_node
                else _selector(plan))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(plan, plan.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": PORT_NAME, "port": plan.profile.port, "targetPort": PORT_NAME,
                       "protocol": "TCP"}],
        },
    }


def objects(plan: RenderPlan) -> list[dict[str, Any]]:
    """Every object of the plan, in the order ``kubectl apply`` should create them."""
    out = [launch_configmap(plan)]
    if plan.ranktable is not None:
        out.append(ranktable_configmap(plan))
    out.append(leaderworkerset(plan) if plan.multi_node else deployment(plan))
    out.append(service(plan))
    return out
