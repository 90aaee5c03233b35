"""Shared fixtures; and one ordering constraint between two libraries the tests load in-process."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from vllm_server import *  # noqa: F403 - the vLLM fixtures


def pytest_sessionstart(session: pytest.Session) -> None:
    """Load torch's compiler front end before any test imports Ansible.

    Ansible replaces ``sys.intern`` with a wrapper object when its modules load (to accept str
    subclasses); ``torch._dynamo`` registers ``sys.intern`` at import and refuses anything but a
    function. In one pytest process both happen (filter and module tests import Ansible, the
    tiny-model tests import torch through transformers), so torch goes first. Production never
    loads both in one process: ``ascend-serve model make-tiny`` does not import Ansible.
    """
    with contextlib.suppress(ImportError):
        import torch._dynamo  # noqa: F401


@pytest.fixture
def sim_root(tmp_path: Path) -> Path:
    """A scratch node filesystem (``ASCEND_SIM_ROOT``)."""
    root = tmp_path / "root"
    root.mkdir()
    return root


@pytest.fixture
def node_file(tmp_path: Path) -> Path:
    """Where the node description (``ASCEND_SIM_NODE``) is written."""
    return tmp_path / "node.json"


# Seconds each long test (or group of tests) takes in a full run on this machine kind (2 cores,
# 2 workers), measured or estimated (see docs/testing.md, "How long it takes").
# Under pytest-xdist (``--dist loadgroup``) the workers take work in this order as they free up
# (each is handed its next one while it still runs the last), so the longest go first and the
# quick tests fill the end; otherwise one worker may start a 10-minute scenario when everything
# else is done. The vLLM tests are one unit of work (one worker, one server at a time): it is
# placed by its total (the VLLM_GROUP entry). Unknown molecule tests (a new scenario) go after
# these, before the rest.
VLLM_GROUP = "xdist_group[vllm]"
LONGEST_FIRST = {
    # Seconds in the CI run of 2026-12-06 13:36 (2 workers), after the nodes were reached over
    # SSH with pipelining (docs/testing.md); the vLLM group's from its tests alone.
    VLLM_GROUP: 575,  # 26 tests 423 s alone, the router tests 120 s, fleet scale and PD parse ~30 s
    "test_local_deploy_fresh_then_no_change": 478,  # + the router, validate through it, a drain
    "test_molecule_scenario[container]": 475,
    # + preflight, host and os_base verify (was default, host, os_base)
    "test_molecule_scenario[serving]": 423,
    # + the canary's upgrade checks (was molecule stack_upgrade)
    "test_rollout_stops_at_the_failed_batch_and_a_rerun_repairs": 403,
    "test_molecule_scenario[multinode]": 216,
    "test_molecule_scenario[k8s_node]": 162,  # + the fault taint
    "test_molecule_scenario[stack_faults]": 118,
    "test_molecule_scenario[os_base_dnf]": 88,
}


def pytest_configure(config: pytest.Config) -> None:
    """Keep the order below under ``--dist loadgroup``: pytest-xdist otherwise moves the units of
    work with the most tests first (``--loadscope-reorder``, on by default), which puts the whole
    vLLM group before every container test, whatever its length."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _group_nodeid(item: pytest.Item) -> None:
    """Give a grouped item the ``@group`` suffix that pytest-xdist's loadgroup scheduler reads.

    pytest-xdist 3.8 appends it by assigning ``item._nodeid``, which pytest 9 no longer reads (a
    node's id lives in ``_id``), so its ``xdist_group`` marks had no effect: the vLLM tests ran on
    both workers at once. This does the same through the id pytest 9 reads.
    """
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if names and "@" not in item.nodeid.rsplit("]", 1)[-1]:
        from _pytest.nodeid import coerce_node_id  # pytest 9's id type

        item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


# tryfirst: pytest-xdist's worker turns each item's xdist_group marks into its nodeid's group in
# its own pytest_collection_modifyitems, and this conftest is registered before that plugin, so
# without tryfirst the marks added here came too late and the vLLM tests ran on both workers at
# once (two servers, one port: "Address already in use").
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``) the tests that start vLLM servers share one
    worker, so each tiny server starts once and never two at a time on this 2-core machine;
    long tests run longest first (:data:`LONGEST_FIRST`)."""
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.xdist_group("vllm"))
    if config.getoption("dist", "no") == "no" and getattr(config.option, "loadgroup", False):
        for item in items:
            _group_nodeid(item)

    def weight(item: pytest.Item) -> float:
        if item.name in LONGEST_FIRST:
            return -LONGEST_FIRST[item.name]
        if item.get_closest_marker("vllm") is not None:
            return -LONGEST_FIRST[VLLM_GROUP]
        return -1.0 if item.get_closest_marker("molecule") is not None else 0.0

    items.sort(key=weight)  # stable: the others keep their order
