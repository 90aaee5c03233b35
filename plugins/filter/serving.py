"""Serving filters: resolve a profile, the launcher template's context, the memory fit.

The logic lives in the ``ascend_serve`` Python package (``ascend_serve.serving.profiles``,
``ascend_serve.serving.launcher``, ``ascend_serve.serving.fit``) on the controller, so the
``vllm_service`` role and ``ascend-serve serve`` resolve the same profile and render the same
launcher::

    profile: "{{ 'tiny-deepseek-v3' | ascend_serve.fleet.serving_profile(overrides, files) }}"
    ctx: "{{ profile | ascend_serve.fleet.vllm_launch_context(model_path=..., vllm=..., ...) }}"
    fit: "{{ profile | ascend_serve.fleet.serving_fit(config_json_or_none, hbm_mb, source) }}"
    problems: "{{ profile | ascend_serve.fleet.serving_set_problems(resolved_set_or_name) }}"
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.controller_package import (
    filters_by_name,
    needs_package,
    plain,
)


def _profile(data: Any, filter_name: str) -> Any:
    with needs_package(filter_name):
        from ascend_serve.serving import profiles
    try:
        return profiles.Profile.model_validate(plain(data))
    except ValueError as exc:
        raise AnsibleFilterError(f"{filter_name}: not a resolved profile: {exc}") from exc


def serving_profile(name: Any, overrides: Any = None, files: Any = None) -> dict[str, Any]:
    """Profile name (+ inventory overrides, + extra profile files) -> the resolved profile."""
    with needs_package("serving_profile"):
        from ascend_serve.serving import profiles
    try:
        profile = profiles.resolve(str(name), plain(overrides or {}),
                                   profiles.with_extra_files(plain(files or [])))
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    result: dict[str, Any] = profile.as_dict()
    return result


def vllm_launch_context(
    profile: Any,
    model_path: Any,
    vllm: Any,
    state_dir: Any,
    rank: Any = 0,
    head_address: Any = None,
    set_env: Any = None,
    env_files: Any = None,
    rendered_by: Any = "ascend-serve vllm_service role",
) -> dict[str, Any]:
    """Resolved profile + this node's paths and rank -> the launcher template's variables."""
    with needs_package("vllm_launch_context"):
        from ascend_serve.serving import launcher, profiles
    try:
        ctx: dict[str, Any] = launcher.context(
            _profile(profile, "vllm_launch_context"),
            model_path=str(model_path), vllm=str(vllm), state_dir=str(state_dir),
            rank=int(rank), head_address=str(head_address) if head_address else None,
            set_env=[str(s) for s in plain(set_env or [])],
            env_files=[str(s) for s in plain(env_files or [])],
            rendered_by=str(rendered_by),
        )
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return ctx


def serving_fit(profile: Any, config: Any = None, hbm_mb: Any = None,
                hbm_source: Any = None) -> dict[str, Any] | None:
    """Resolved profile (+ the model's config.json, else the profile's copy; + the HBM of one
    of the node's chips in MB as npu-smi prints it, else the chip's nominal HBM) -> the fit
    report.

    None when no config.json is known for the model (nothing to estimate from).
    """
    with needs_package("serving_fit"):
        from ascend_serve.serving import fit, nodecheck
    parsed = _profile(profile, "serving_fit")
    if config:
        parsed = parsed.model_copy(update={"model": parsed.model.model_copy(
            update={"config": plain(config)})})
    hbm: float | None = None
    if hbm_mb is not None and hbm_mb != "":
        try:
            hbm = int(hbm_mb) / 1024
        except (TypeError, ValueError):
            raise AnsibleFilterError(
                f"serving_fit: hbm_mb must be a number of MB, got {hbm_mb!r}") from None
        if hbm <= 0:
            raise AnsibleFilterError(f"serving_fit: hbm_mb must be positive, got {hbm_mb!r}")
    try:
        report = nodecheck.fit_report(parsed, None, hbm, str(hbm_source) if hbm_source else None)
    except fit.NotEstimableError:
        return None  # an architecture the estimate does not model: nothing to refuse on
    except fit.FitError as exc:
        raise AnsibleFilterError(f"memory fit of profile {parsed.name}: {exc}") from exc
    return None if report is None else dict(report.model_dump())


def serving_set_problems(profile: Any, stack: Any) -> list[str]:
    """Resolved profile + the version set (a resolved set mapping or a set name) -> why that set
    cannot serve the profile, each with the fix (the lowest set of the matrix that can); [] if
    it can."""
    with needs_package("serving_set_problems"):
        from ascend_serve.serving import profiles
        from ascend_serve.stack import matrix as matrix_mod
    parsed = _profile(profile, "serving_set_problems")
    try:
        matrix = matrix_mod.load_matrix()
        given = plain(stack)
        if isinstance(given, str):
            resolved = matrix_mod.resolve(matrix, given)
        else:
            resolved = matrix_mod.StackSet.model_validate(given)
    except ValueError as exc:
        raise AnsibleFilterError(f"serving_set_problems: {exc}") from exc
    problems: list[str] = profiles.set_problems(parsed, resolved, matrix)
    return problems


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters_by_name(serving_profile, vllm_launch_context, serving_fit,
                               serving_set_problems)
