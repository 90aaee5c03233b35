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
  CI manifest ``tests/e2e/nightly/multi_node/scripts/lws.yaml.jinja2`` @ v0.13.0);
- a PD profile: the launchers ConfigMap, a LeaderWorkerSet ``<name>-prefill`` and
  ``<name>-decode`` (a group per engine, a pod per host of it), vllm-router in PD mode as the
  Deployment ``<name>-router`` and the Service ``<name>`` in front of it (docs/kubernetes.md).

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
from ascend_serve.k8s.plan import API_KEY_ENV, LAUNCH_DIR, STATE_DIR, RenderPlan, side_name

CONTAINER = "vllm"
PORT_NAME = "http"
PROBE_PERIOD_S = 10
# What the vllm_service role's unit gives vLLM to stop (vllm_service_stop_timeout).
STOP_GRACE_S = 60
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
# LWS pkg/controllers/pod_controller.go (GroupIndexLabelKey on every pod of a group).
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_INDEX_ENV = "LWS_GROUP_INDEX"
# vllm-router 0.1.17's --prometheus-port default (router_args.py).
ROUTER_METRICS_PORT = 29000


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


def _pod_spec(plan: RenderPlan, launch: str, head: bool, *, npus: int | None = None,
              port: int | None = None, env_first: list[dict[str, Any]] | None = None
              ) -> dict[str, Any]:
    profile = plan.profile
    volumes, mounts = _volumes(plan)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", f"{LAUNCH_DIR}/{launch}"],
        "resources": {"limits": {ascend.NPU_RESOURCE: npus or profile.chips_per_node}},
        "volumeMounts": mounts,
    }
    env: list[dict[str, Any]] = list(env_first or [])
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
        container["ports"] = [{"name": PORT_NAME, "containerPort": port or profile.port,
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


# --- prefill/decode (PD) profiles -------------------------------------------------------------


def pd_launch_configmap(plan: RenderPlan) -> dict[str, Any]:
    assert plan.pd is not None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(plan, f"{plan.name}-launch"),
        "data": dict(sorted(plan.pd.launchers.items())),
    }


def pd_leaderworkerset(plan: RenderPlan, side: str) -> dict[str, Any]:
    """One side's LeaderWorkerSet: a group per engine, a pod per host of the engine.

    A pod runs ``<side>-<group>-<worker>.sh``: the group index comes from the pod's label
    ``leaderworkerset.sigs.k8s.io/group-index`` (LWS sets it on every pod of a group; its
    environment carries the worker index but not the group's), through the downward API."""
    assert plan.pd is not None
    engines, hosts = plan.pd.groups[side]
    name = side_name(plan.name, side)
    part = plan.profile.pd.side(side) if plan.profile.pd else None
    assert part is not None
    npus = part.ranks_per_node * part.tensor
    labels = {**_labels(plan), "ascend-serve/pd-role": side}

    def template(role: str, worker: str) -> dict[str, Any]:
        launch = f"{side}-$({LWS_GROUP_INDEX_ENV})-{worker}.sh"
        group_env = [{"name": LWS_GROUP_INDEX_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{LWS_GROUP_INDEX_LABEL}']"}}}]
        return {"metadata": {"labels": {**labels, "role": role}},
                "spec": _pod_spec(plan, launch, head=True, npus=npus,
                                  port=plan.pd.ports[side][0] if plan.pd else None,
                                  env_first=group_env)}

    lwt: dict[str, Any] = {
        "size": hosts,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": template("leader", "0"),
        # Required by the CRD; no pod uses it where an engine has one host (size 1).
        "workerTemplate": template("worker", f"$({ascend.LWS_WORKER_INDEX})"),
    }
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {**_meta(plan, name), "labels": dict(labels)},
        "spec": {"replicas": engines, "leaderWorkerTemplate": lwt},
    }


def router_deployment(plan: RenderPlan) -> dict[str, Any]:
    """vllm-router in PD mode over every rank of both sides (``pd_router_argv``)."""
    assert plan.pd is not None
    labels = {**_labels(plan), "app.kubernetes.io/name": "vllm-router"}
    selector = {"app.kubernetes.io/name": "vllm-router", "app.kubernetes.io/instance": plan.name}
    container: dict[str, Any] = {
        "name": "router",
        "image": plan.pd.router_image,
        "imagePullPolicy": "IfNotPresent",
        "command": plan.pd.router_argv,
        "ports": [{"name": PORT_NAME, "containerPort": plan.profile.port, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": ROUTER_METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": _probe("/readiness", PROBE_PERIOD_S, 3),
        "livenessProbe": _probe("/liveness", 30, 3),
    }
    if plan.options.api_key_secret:
        # --api-key $(VLLM_API_KEY): the kubelet expands it from this environment; in PD mode
        # the router also sends OPENAI_API_KEY to prefill and decode (docs/pd-disaggregation.md).
        container["env"] = [
            {"name": env, "valueFrom": {"secretKeyRef": {
                "name": plan.options.api_key_secret, "key": API_KEY_ENV}}}
            for env in (API_KEY_ENV, "OPENAI_API_KEY")]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_meta(plan, f"{plan.name}-router"), "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": dict(labels)},
                         "spec": {"containers": [container],
                                  "terminationGracePeriodSeconds": STOP_GRACE_S}},
        },
    }


def router_service(plan: RenderPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(plan, plan.name),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": "vllm-router",
                         "app.kubernetes.io/instance": plan.name},
            "ports": [{"name": PORT_NAME, "port": plan.profile.port, "targetPort": PORT_NAME,
                       "protocol": "TCP"}],
        },
    }


def objects(plan: RenderPlan) -> list[dict[str, Any]]:
    """Every object of the plan, in the order ``kubectl apply`` should create them."""
    if plan.pd is not None:
        return [pd_launch_configmap(plan), pd_leaderworkerset(plan, "prefill"),
                pd_leaderworkerset(plan, "decode"), router_deployment(plan),
                router_service(plan)]
    out = [launch_configmap(plan)]
    if plan.ranktable is not None:
        out.append(ranktable_configmap(plan))
    out.append(leaderworkerset(plan) if plan.multi_node else deployment(plan))
    out.append(service(plan))
    return out
