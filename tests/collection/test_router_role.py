"""The router role's plan (ascend_serve.serving.router.service_plan through the filter plugin
router_service_plan), its locks, and its wiring into the playbooks and the rollout."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError  # type: ignore[import-untyped]
from paths import DATA, PLAYBOOKS, ROLES, ROOT

from ansible_collections.ascend_serve.fleet.plugins.filter.router import router_service_plan
from ascend_serve.serving.router import RouterPlanError, RouterSettings, WorkerHost, service_plan
from ascend_serve.stack.lock import normalize, pins_of, targets
from ascend_serve.stack.matrix import load_matrix

EXE = "/opt/ascend-serve/router/bin/vllm-router"
KEY = "${OPENAI_API_KEY}"


def host(name: str, **hostvars: Any) -> dict[str, Any]:
    return {"inventory_hostname": name, **hostvars}


def test_replicas_from_profiles_and_rank_ports_less_the_drained() -> None:
    plan = router_service_plan(
        "r1", "regular", EXE, {"port": 30000, "policy": "round_robin", "host": "10.9.0.1"},
        hosts=[host("n1", vllm_service_profile="tiny-deepseek-v3", ansible_host="10.0.0.1"),
               host("n2", router_worker_ports=[7100, 7101], router_worker_address="10.1.0.2"),
               host("n3", ansible_host="10.0.0.3"),  # serves nothing: not a worker
               host("n4", vllm_service_profile="tiny-deepseek-v3",
                    vllm_service_overrides={"port": 8080})],
        drained=["n2", "gone"], api_key_ref=KEY)
    assert plan["workers"] == {"n1": ["http://10.0.0.1:8000"],
                               "n2": ["http://10.1.0.2:7100", "http://10.1.0.2:7101"],
                               "n4": ["http://n4:8080"]}
    assert plan["active"] == ["http://10.0.0.1:8000", "http://n4:8080"]
    assert (plan["drained"], plan["unknown_drained"]) == (["n2"], ["gone"])
    assert plan["worker_args"] == ["--worker-urls", "http://10.0.0.1:8000", "http://n4:8080"]
    assert plan["workers_env"] == (
        'ROUTER_WORKER_ARGS="--worker-urls http://10.0.0.1:8000 http://n4:8080"\n')
    assert plan["argv"] == [EXE, "--host", "10.9.0.1", "--port", "30000", "--policy",
                            "round_robin", "--prometheus-host", "127.0.0.1", "--prometheus-port",
                            "29000", "--api-key", KEY]


def test_pd_mode_lists_prefill_then_decode_rank_workers() -> None:
    plan = router_service_plan(
        "r1", "pd", EXE, {"retry_max_retries": 3, "cb_failure_threshold": ""},
        prefill=[host("p1", router_worker_ports=[7100, 7101])],
        decode=[host("d1", router_worker_ports=[7100]), host("d2", router_worker_ports=[7100])],
        drained=["d2"])
    assert plan["argv"][:2] == [EXE, "--vllm-pd-disaggregation"]
    assert "--retry-max-retries" in plan["argv"] and "--cb-failure-threshold" not in plan["argv"]
    assert "--api-key" not in plan["argv"]
    assert plan["worker_args"] == ["--prefill", "http://p1:7100", "--prefill", "http://p1:7101",
                                   "--decode", "http://d1:7100"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "regular", "hosts": [host("n3")]},
     "router r1: no workers: the worker group 'servers' has no hosts"),
    ({"mode": "pd", "prefill": [host("p1", router_worker_ports=[7100])]},
     "router r1: PD mode with no decode workers: the group 'dec' has no hosts while 'pre' has 1"),
    ({"mode": "pd", "prefill": [host("p1")], "decode": [host("d1", router_worker_ports=[1])]},
     "worker host p1 of group 'pre' has no port"),
    ({"mode": "regular", "hosts": [host("a", router_worker_ports=[8000], ansible_host="x"),
                                   host("b", router_worker_ports=[8000], ansible_host="x")]},
     "worker http://x:8000 is both a and b's"),
    ({"mode": "regular", "hosts": [host("a", router_worker_ports=[70000])]},
     "port 70000 is outside 1-65535"),
    ({"mode": "regular", "hosts": [host("a", router_worker_ports=[1],
                                        router_worker_address="a b")]},
     "has the address 'a b'"),
    ({"mode": "regular", "hosts": [host("a", router_worker_ports=[1])],
      "settings": {"policy": "fastest"}}, "router r1: router policy 'fastest' is not one of"),
    ({"mode": "regular", "hosts": [host("a", router_worker_ports=[1])],
      "settings": {"threads": 2}}, "unknown settings ['threads']"),
    ({"mode": "both"}, "mode 'both' is not one of regular, pd"),
    ({"mode": "regular", "hosts": [host("a", vllm_service_profile="no-such-profile")]},
     "host a:"),
])
def test_refusals_name_the_router_host_and_the_cause(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(AnsibleFilterError) as caught:
        router_service_plan("r1", executable=EXE,
                            groups={"hosts": "servers", "prefill": "pre", "decode": "dec"},
                            **kwargs)
    assert message in str(caught.value)


def test_every_worker_drained_leaves_an_empty_list() -> None:
    # vllm-router 0.1.17 starts with `--worker-urls` and nothing after it and answers 503.
    plan = service_plan("r1", "regular", EXE, RouterSettings(),
                        hosts=[WorkerHost("a", "10.0.0.1", (8000,))], drained=["a"])
    assert (plan.worker_args, plan.active, plan.drained) == (["--worker-urls"], [], ["a"])
    with pytest.raises(RouterPlanError, match="cannot stand unquoted"):
        service_plan("r1", "regular", "/opt/my router/vllm-router", RouterSettings(),
                     hosts=[WorkerHost("a", "10.0.0.1", (8000,))])


def test_every_set_target_has_a_router_lock_of_the_same_router() -> None:
    wanted = (DATA / "locks" / "router.in").read_text(encoding="utf-8").split()
    assert wanted == ["vllm-router==0.1.17"]
    for stack in load_matrix().sets:
        for target in targets(stack):
            lock = DATA / "locks" / stack.name / "router" / f"{target.name}.txt"
            text = lock.read_text(encoding="utf-8")
            # uv's own header: resolved for the set's target (platform, Python), wheels only.
            assert (f"--only-binary :all: --exclude-newer 2026-12-04 --python-platform "
                    f"{target.platform} --python-version {target.python} ../../router.in"
                    ) in text, lock
            pins = pins_of(text)
            assert pins[normalize("vllm-router")] == "0.1.17", lock
            blocks = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2])
            assert all("--hash=sha256:" in block for block in blocks), lock
    # The x86_64 lock of the CPU set is the one the router tests' venv is made from.
    assert "data/locks/$VLLM_SET/router/py$py-$(uname -m).txt" in (
        ROOT / "scripts" / "bootstrap.sh").read_text(encoding="utf-8")


def test_the_router_is_wired_into_serving_and_the_rollout() -> None:
    serving = yaml.safe_load((PLAYBOOKS / "serving.yml").read_text())
    route = [play for play in serving if play.get("hosts") == "vllm_routers"]
    assert [r["role"] for r in route[0]["roles"]] == ["ascend_serve.fleet.router"]
    rollout = ROLES / "rollout" / "tasks"
    for step in ("drain", "resume"):
        tasks = next(t["block"] for t in yaml.safe_load((rollout / f"{step}.yml").read_text())
                     if "block" in t)
        routers = [t for t in tasks if "ansible.builtin.include_role" in t]
        assert [(t["ansible.builtin.include_role"], t["loop"]) for t in routers] == [
            ({"name": "ascend_serve.fleet.router", "tasks_from": step},
             "{{ groups[rollout_router_group] | default([]) }}")]
        hooks = [t for t in tasks if "ansible.builtin.command" in t]
        assert hooks and tasks.index(routers[0]) < tasks.index(hooks[0])  # router, then hook
    defaults = yaml.safe_load((ROLES / "rollout" / "defaults" / "main.yml").read_text())
    assert defaults["rollout_router_group"] == "vllm_routers"
    inventory = yaml.safe_load((ROOT / "inventories" / "local" / "hosts.yml").read_text())
    assert "ascend-local-a2" in inventory["all"]["children"]["vllm_routers"]["hosts"]


def test_the_replica_fleet_example_routes_to_four_replicas_on_the_backend_network() -> None:
    listed = json.loads(subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i",
         "inventories/prod-replicas/hosts.yml", "--list"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    hostvars = listed["_meta"]["hostvars"]
    nodes = listed["ascend_nodes"]["hosts"]
    router = hostvars["router-01"]
    plan = router_service_plan(
        "router-01", "regular", EXE,
        {"port": router["router_port"], "policy": router["router_policy"],
         "retry_max_retries": router["router_retry_max_retries"]},
        hosts=[{"inventory_hostname": n, **hostvars[n]} for n in nodes])
    assert plan["active"] == [f"http://10.30.0.1{i}:8000" for i in range(1, 5)]
    assert (DATA / "locks" / router["router_set"] / "router" / "py3.10-aarch64.txt").is_file()
