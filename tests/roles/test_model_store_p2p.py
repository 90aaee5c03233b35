"""The model_store role's peer-to-peer inputs: refused with the host and the cause, before any
change (the plan is read-only; nothing is created on this machine)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from ansible_run import ansible_playbook, play_role


def manifest_file(tmp_path: Path) -> Path:
    data = b"weights"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"format": 1, "name": "tiny", "files": [
        {"path": "model.safetensors", "size": len(data),
         "sha256": hashlib.sha256(data).hexdigest()}]}))
    return path


def role_vars(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"ansible_python_interpreter": sys.executable, "model_store_name": "tiny",
            "model_store_source": "http://127.0.0.1:9/tiny",
            "model_store_manifest": str(manifest_file(tmp_path)),
            "model_store_root": str(tmp_path / "models"), "model_store_p2p_enabled": True,
            **extra}


def test_p2p_without_a_cidr_network_or_with_a_path_source_is_refused(tmp_path: Path) -> None:
    proc = play_role(tmp_path, "model_store", role_vars(tmp_path, model_store_p2p_network="eth1"),
                     name="p2p inputs")
    assert proc.returncode != 0
    assert "model_store on localhost: peer-to-peer staging needs" in proc.stdout, proc.stdout
    assert 'model_store_p2p_network as an IPv4 CIDR network (got "eth1")' in proc.stdout
    assert not (tmp_path / "models").exists()


def test_a_peer_network_the_host_lacks_is_refused_by_the_plan(tmp_path: Path) -> None:
    proc = play_role(tmp_path, "model_store",
                     role_vars(tmp_path, model_store_p2p_network="203.0.113.0/24"),
                     name="p2p network")
    assert proc.returncode != 0
    assert "Plan the staging" in proc.stdout
    assert "no address in the peer network 203.0.113.0/24" in proc.stdout, proc.stdout
    assert "Nothing was changed" in proc.stdout
    assert not (tmp_path / "models").exists()


def test_the_peers_are_the_other_hosts_staging_the_same_model(tmp_path: Path) -> None:
    """p2p_peers.yml over four hosts' plans: two stage tiny, one has it complete (no peer
    address in its plan), one stages another model."""
    plans = {
        "a": {"name": "tiny", "p2p": {"peer": "10.0.0.1:6881"}},
        "b": {"name": "tiny", "p2p": {"peer": "10.0.0.2:6881"}},
        "c": {"name": "tiny", "p2p": {}},
        "d": {"name": "other", "p2p": {"peer": "10.0.0.4:6881"}},
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "plan": plan} for h, plan in plans.items()}}}))
    out = tmp_path / "peers"
    out.mkdir()
    playbook = tmp_path / "peers.yml"
    playbook.write_text(json.dumps([{
        "name": "peers", "hosts": "all", "gather_facts": False,
        "tasks": [
            {"name": "The plan", "ansible.builtin.set_fact": {"_model_store_plan": "{{ plan }}"}},
            {"name": "The peers", "ansible.builtin.include_role": {
                "name": "ascend_serve.fleet.model_store", "tasks_from": "p2p_peers.yml"}},
            {"name": "Keep them", "ansible.builtin.copy": {
                "content": "{{ _model_store_p2p_peers | to_json }}",
                "dest": f"{out}/{{{{ inventory_hostname }}}}.json", "mode": "0644"},
             "delegate_to": "localhost"},
        ]}]))
    proc = ansible_playbook("-i", str(inventory), str(playbook))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    peers = {h: json.loads((out / f"{h}.json").read_text()) for h in plans}
    assert peers == {"a": ["10.0.0.2:6881"], "b": ["10.0.0.1:6881"],
                     "c": ["10.0.0.1:6881", "10.0.0.2:6881"], "d": []}
