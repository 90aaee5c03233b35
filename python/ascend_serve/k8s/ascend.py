"""What an Ascend serving pod needs from the platform, each fact with its primary source.

Sources (MC = github.com/Ascend/mind-cluster at commit 22bb3d987bc0208c3eb7395e222b661276133c58,
its documentation has no release tag; VA = github.com/vllm-project/vllm-ascend; LWS =
github.com/kubernetes-sigs/lws):

- NPU resource: MindCluster's ascend-device-plugin advertises the whole-chip resource
  ``huawei.com/Ascend910`` for 910-series chips (A2 910B and A3 910C alike): MC
  ``component/ascend-common/api/default_name.go`` (``HuaweiAscend910``), its node capacity in
  ``docs/en/scheduling/installation_guide/03_confirming_status.md`` and pod limits
  (``huawei.com/Ascend910: 2``) in ``docs/en/scheduling/api/ascend_job.md``.
- Node labels: MC ``docs/en/scheduling/api/k8s.md`` (Table 4, "Node labels used by cluster
  scheduling components") and, per server, Table 1 of
  ``docs/en/scheduling/developer_guide/installation_deployment/manual_installation/01_preparing_for_installation.md``:
  ``accelerator=huawei-Ascend910`` on every 910 node; ``accelerator-type=module-{xxx}b-8`` ({xxx}
  the chip model, 910) on Atlas 800T/800I A2 servers, ``accelerator-type=module-a3-16`` on
  Atlas 800T/800I A3 SuperPoD servers; ``host-arch=huawei-arm`` on Kunpeng (aarch64) hosts.
- Rank table: MindCluster mounts a job's ``hccl.json`` from a ConfigMap at
  ``/user/serverid/devindex/config`` (MC ``docs/en/scheduling/api/hccl.json_file_description.md``)
  and names its path in ``RANK_TABLE_FILE`` (MC
  ``docs/en/scheduling/api/environment_variable_description.md``).
- Host paths, image names, the image's ``vllm`` and ``set_env`` scripts: the collection's
  ``data/ascend-container.yml``, which cites VA ``docs/source/installation.md`` and
  ``docs/source/tutorials/DeepSeek-R1.md`` @ v0.13.0 and VA's Dockerfiles, and which the
  vllm_service role reads too (``vllm_service_runtime: container``); a memory-backed ``/dev/shm``
  as in VA's multi-node CI ``tests/e2e/nightly/multi_node/scripts/lws.yaml.jinja2`` @ v0.13.0
  (volume ``dshm``).
- Leader address: LWS ``pkg/utils/pod/pod_utils.go`` @ v0.10.0 (``AddLWSVariables``) gives every
  pod of a group ``LWS_LEADER_ADDRESS`` = ``<lws name>-<group index>.<subdomain>.<namespace>``
  (the subdomain is the LWS's name under the default ``subdomainPolicy: Shared``) and
  ``LWS_WORKER_INDEX`` (0 for the leader).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, cast

import yaml

from ascend_serve.resources import data_path
from ascend_serve.serving.fit import NODE_CHIPS

NPU_RESOURCE = "huawei.com/Ascend910"
ACCELERATOR_LABEL = "accelerator"
ACCELERATOR_VALUE = "huawei-Ascend910"
ACCELERATOR_TYPE_LABEL = "accelerator-type"
HOST_ARCH_LABEL = "host-arch"
HOST_ARCH_ARM = "huawei-arm"

RANKTABLE_DIR = "/user/serverid/devindex/config"
RANKTABLE_FILE = "hccl.json"
RANKTABLE_ENV = "RANK_TABLE_FILE"



@cache
def container_facts() -> dict[str, Any]:
    """``data/ascend-container.yml``: what a vllm-ascend container needs from the host."""
    return cast(dict[str, Any], yaml.safe_load(data_path("ascend-container.yml").read_text()))


IMAGE_REPOSITORY: str = container_facts()["image"]["repository"]
IMAGE_SET_ENV: tuple[str, ...] = tuple(container_facts()["image"]["set_env"])
IMAGE_VLLM: str = container_facts()["image"]["vllm"]

LWS_WORKER_INDEX = "LWS_WORKER_INDEX"


@dataclass(frozen=True)
class HostMount:
    """A host path mounted read-only at the same path in the container."""

    name: str
    path: str
    type: Literal["File", "Directory"]


HOST_MOUNTS: tuple[HostMount, ...] = tuple(
    HostMount(m["name"], m["path"], m["type"]) for m in container_facts()["host_mounts"])


def accelerator_type(chip: str) -> str:
    """MindCluster's ``accelerator-type`` of the server a chip comes in (A2: 8 chips, A3: 16)."""
    if chip == "910C":
        return "module-a3-16"
    if chip.startswith("910B"):
        return f"module-910b-{NODE_CHIPS[chip]}"
    raise ValueError(f"no MindCluster server type known for chip {chip!r}")


def node_selector(chip: str) -> dict[str, str]:
    """The MindCluster node labels of a Kunpeng server with ``chip`` NPUs."""
    return {
        ACCELERATOR_LABEL: ACCELERATOR_VALUE,
        ACCELERATOR_TYPE_LABEL: accelerator_type(chip),
        HOST_ARCH_LABEL: HOST_ARCH_ARM,
    }


def image(vllm_ascend: str, chip: str) -> str:
    """vllm-ascend's published image of a release for ``chip`` (A3 images carry ``-a3``)."""
    suffix = container_facts()["image"]["a3_suffix"] if chip == "910C" else ""
    return f"{IMAGE_REPOSITORY}:v{vllm_ascend}{suffix}"


def leader_address(name: str, namespace: str, group: int = 0) -> str:
    """``LWS_LEADER_ADDRESS`` of group ``group`` of the LeaderWorkerSet ``name``."""
    return f"{name}-{group}.{name}.{namespace}"


def pod_address(name: str, namespace: str, group: int, worker: int) -> str:
    """The DNS name of pod ``worker`` of group ``group`` of the LeaderWorkerSet ``name``: the
    leader's is :func:`leader_address`; a worker pod is ``<name>-<group>-<worker>`` (the
    group's worker StatefulSet ``<name>-<group>``) under the same subdomain."""
    if worker == 0:
        return leader_address(name, namespace, group)
    return f"{name}-{group}-{worker}.{name}.{namespace}"
