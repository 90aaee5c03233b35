"""Kubernetes manifests of a serving profile (``ascend-serve k8s render``).

One module per concern:

- :mod:`~ascend_serve.k8s.ascend`: what an Ascend serving pod needs from the platform
  (MindCluster's device-plugin resource and node labels, the host paths vllm-ascend's guides
  mount, the vllm-ascend image names, the paths inside that image), each with its source;
- :mod:`~ascend_serve.k8s.plan`: the checks before anything is rendered (profile, version set,
  memory fit, rank table) and the launchers, rendered from the same template as the systemd unit;
- :mod:`~ascend_serve.k8s.objects`: the Kubernetes objects (ConfigMaps, Deployment or
  LeaderWorkerSet, Service) of a plan;
- :mod:`~ascend_serve.k8s.output`: multi-document YAML, files and a ``kustomization.yaml``.
"""
