"""``ascend-serve k8s render``: Kubernetes manifests of a serving profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ascend_serve.cli.console import EXIT_FAILED, console, fail
from ascend_serve.cli.options import ProfileFiles, ProfileName, ProfileSet, json_option
from ascend_serve.k8s import autoscale, output
from ascend_serve.k8s.objects import objects
from ascend_serve.k8s.plan import RenderError, RenderOptions, make_plan
from ascend_serve.serving.load_metrics import MetricInputError, parse_range, parse_targets

k8s_app = typer.Typer(
    help="Kubernetes manifests (MindCluster device plugin, LeaderWorkerSet) of serving profiles.",
    no_args_is_help=True,
)


@k8s_app.callback()
def k8s_group() -> None:
    """Kubernetes manifests of serving profiles: ``render``."""


@k8s_app.command("render")
def render_command(
    profile: ProfileName,
    assignments: ProfileSet = None,
    profile_files: ProfileFiles = None,
    name: Annotated[str | None, typer.Option(
        help="Name of the objects (default: the profile's, '.' as '-').")] = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace.")] = "default",
    stack_set: Annotated[str | None, typer.Option(
        help="Version set whose vllm-ascend image serves (default: the newest set of the "
        "matrix that serves the profile).")] = None,
    image: Annotated[str | None, typer.Option(
        help="Container image (default: quay.io/ascend/vllm-ascend:v<set's vllm-ascend>, "
        "-a3 for 910C).")] = None,
    vllm: Annotated[str, typer.Option(
        help="The vllm executable in the image.")] = "vllm",
    model_pvc: Annotated[str | None, typer.Option(
        help="PersistentVolumeClaim holding the model (mounted read-only).")] = None,
    model_subpath: Annotated[str | None, typer.Option(
        help="The model's directory inside the claim (with --model-pvc).")] = None,
    model_host_path: Annotated[str | None, typer.Option(
        help="The model's directory on every node (default: the model_store role's, "
        "/var/lib/ascend-serve/models/<model name>).")] = None,
    env_files: Annotated[list[str] | None, typer.Option(
        "--env-file", help="KEY=value file on the node the launcher loads, e.g. "
        "/etc/ascend-serve/hccl.env of the hccl role; repeatable.")] = None,
    ranktable: Annotated[Path | None, typer.Option(
        help="A rank table (hccl.json) to hand to the pods (RANK_TABLE_FILE), for software in "
        "them that reads one; vLLM's data-parallel and PD serving read none.")] = None,
    ranktable_plan: Annotated[Path | None, typer.Option(
        help="Build the rank table from this device IP plan (as ascend-serve ranktable "
        "generate --plan).")] = None,
    host_network: Annotated[bool, typer.Option(
        help="Run on the node's network, as vllm-ascend's guides run the container "
        "(--net=host).")] = True,
    api_key_secret: Annotated[str | None, typer.Option(
        help="Secret whose key VLLM_API_KEY holds the API key clients must send (vLLM reads it "
        "from its environment, never from its command line).")] = None,
    router_image: Annotated[str | None, typer.Option(
        help="PD profiles: the image of the router (vllm-router installed); required for "
        "them.")] = None,
    router_executable: Annotated[str, typer.Option(
        help="PD profiles: the vllm-router executable in --router-image.")] = "vllm-router",
    output_dir: Annotated[Path | None, typer.Option(
        "--output-dir", "-o", help="Write one file per object here (default: one YAML stream "
        "on standard output).")] = None,
    with_kustomization: Annotated[bool, typer.Option(
        "--kustomization/--no-kustomization",
        help="With --output-dir: also write kustomization.yaml (kubectl apply -k).")] = True,
    autoscale_range: Annotated[str | None, typer.Option(
        "--autoscale", metavar="MIN:MAX",
        help="Also render an autoscaler of the workload between MIN and MAX replicas, on vLLM's "
        "waiting requests and KV-cache use.")] = None,
    autoscaler: Annotated[str, typer.Option(
        help="With --autoscale: 'hpa' (HorizontalPodAutoscaler + prometheus-adapter rules) or "
        "'keda' (KEDA ScaledObject).")] = "hpa",
    scale_targets: Annotated[list[str] | None, typer.Option(
        "--scale-target", metavar="METRIC=VALUE",
        help="With --autoscale: per-replica target of 'waiting' (requests, default 2) or "
        "'kv_cache' (fraction, default 0.8); repeatable; naming any uses only those named.")
    ] = None,
    prometheus_url: Annotated[str, typer.Option(
        help="With --autoscaler keda: the Prometheus KEDA queries.")
    ] = autoscale.DEFAULT_PROMETHEUS_URL,
    as_json: Annotated[bool, json_option(
        "Print a JSON summary (objects, files, image; the YAML too without --output-dir).")
    ] = False,
) -> None:
    """Render a Deployment (single-node profile) or a LeaderWorkerSet (multi-node profile),
    its launcher (and, when given, rank table) ConfigMaps and a Service, from the same launcher
    template as the systemd unit. A PD profile renders a prefill and a decode LeaderWorkerSet
    (one group per engine, one pod per host, every rank's vllm serve in its launcher) and
    vllm-router in PD mode as a Deployment with the Service.

    Exit codes: 0 rendered, 1 a check failed (the profile does not fit, the rank table is not
    valid or does not match the profile), 2 bad input (unknown profile, a PD layout the checks
    refuse, a PD profile without --router-image or with a rank table or --autoscale, bad names
    or paths, --autoscale MIN > MAX, an unknown metric), 3 the files could not be written.
    Nothing is written unless every check passed.
    """
    options = RenderOptions(
        profile=profile, assignments=assignments or [], profile_files=profile_files or [],
        name=name, namespace=namespace, stack_set=stack_set, image=image, vllm=vllm,
        model_pvc=model_pvc, model_subpath=model_subpath, model_host_path=model_host_path,
        env_files=env_files or [], ranktable=ranktable, ranktable_plan=ranktable_plan,
        host_network=host_network, api_key_secret=api_key_secret, router_image=router_image,
        router_executable=router_executable)
    scale: autoscale.ScaleSpec | None = None
    if autoscale_range is not None or scale_targets:
        if autoscaler not in autoscale.AUTOSCALERS:
            raise fail(f"--autoscaler {autoscaler!r}: use one of "
                       f"{', '.join(autoscale.AUTOSCALERS)}")
        if autoscale_range is None:
            raise fail("--scale-target needs --autoscale MIN:MAX")
        try:
            low, high = parse_range(autoscale_range)
            targets = parse_targets(scale_targets)
        except MetricInputError as exc:
            raise fail(f"--autoscale: {exc}") from exc
        scale = autoscale.ScaleSpec(low, high, targets,
                                    "keda" if autoscaler == "keda" else "hpa", prometheus_url)
    try:
        plan = make_plan(options)
    except RenderError as exc:
        raise fail(str(exc), exc.code) from exc
    objs = objects(plan)
    workload = objs[-2]
    if plan.pd is not None and scale is not None:
        raise fail(f"profile {plan.profile.name} is a PD profile: --autoscale scales one "
                   "workload, and a PD deployment's engines are fixed by its kv_ports and "
                   "engine ids; change pd.<side>.engines instead")
    if scale is not None:
        ref = autoscale.WorkloadRef.of(workload, plan.profile.model.served_name,
                                       plan.profile.health_timeout_s)
        autoscale.hand_over(workload)
        objs += autoscale.objects(ref, scale, output.dump)
    summary: dict[str, Any] = {
        "profile": plan.profile.name,
        "name": plan.name,
        "namespace": options.namespace,
        "kind": "PD" if plan.pd is not None else workload["kind"],
        "nodes": plan.profile.nodes,
        "stack_set": plan.stack_set,
        "image": plan.image,
        "objects": [{"kind": o["kind"], "name": o["metadata"]["name"]} for o in objs],
    }
    if output_dir is None:
        text = output.stream(objs)
        if as_json:
            typer.echo(json.dumps({**summary, "manifests": text}, indent=2))
        else:
            typer.echo(text, nl=False)
        return
    texts = output.planned_files(objs, with_kustomization)
    try:
        paths = output.write(output_dir, texts)
    except OSError as exc:
        raise fail(f"cannot write {output_dir}: {exc.strerror or exc}", EXIT_FAILED) from exc
    summary["files"] = [str(p) for p in paths]
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        console.print(
            f"[green]wrote[/green] {len(paths)} file(s) to {escape(str(output_dir))}: "
            f"{summary['kind']} {escape(plan.name)} ({plan.profile.nodes} node(s)), image "
            f"{escape(plan.image)}", highlight=False)
