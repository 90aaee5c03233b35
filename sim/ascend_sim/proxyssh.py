"""How the test bed reaches a simulated node over SSH without a network address.

Ansible connects as to a real node, over SSH with pipelining (one round trip per task), but the
transport is ``sshd -i`` started inside the container by ``podman exec`` (a ProxyCommand), so no
address, port or running sshd is needed. ``scripts/bootstrap.sh`` makes the files under
``.cache/test-ssh/``: the client key, the ``authorized_keys`` file every node mounts, and
``known_hosts`` holding the node image's host key under :data:`HOST_KEY_ALIAS` (all nodes of the
test bed share the image's host keys; they are checked). Molecule's shared config
(``.config/molecule/config.yml``) and ``inventories/local/hosts.yml`` say the same in YAML.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_SSH = ROOT / ".cache" / "test-ssh"
HOST_KEY_ALIAS = "ascend-serve-test-node"
PROXY = "podman exec -i %h sh -c 'mkdir -p -m 0755 /run/sshd && exec /usr/sbin/sshd -i'"


class MissingIdentityError(RuntimeError):
    """The test bed's SSH files are not there (``scripts/bootstrap.sh`` makes them)."""


def authorized_keys(ssh_dir: Path = TEST_SSH) -> Path:
    path = ssh_dir / "authorized_keys"
    if not path.is_file():
        raise MissingIdentityError(f"{path} is missing: run scripts/bootstrap.sh")
    return path


def volume(ssh_dir: Path = TEST_SSH) -> str:
    """The mount that lets the test bed's key log in as root on a node."""
    return f"{authorized_keys(ssh_dir)}:/root/.ssh/authorized_keys:ro"


def inventory_vars(ssh_dir: Path = TEST_SSH) -> dict[str, object]:
    """Inventory variables that reach a node named as its container, host key checked."""
    authorized_keys(ssh_dir)
    return {
        "ansible_connection": "ansible.builtin.ssh",
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(ssh_dir / "id_ed25519"),
        "ansible_ssh_pipelining": True,
        "ansible_ssh_common_args": (
            f'-o "ProxyCommand={PROXY}" -o HostKeyAlias={HOST_KEY_ALIAS} '
            f"-o UserKnownHostsFile={ssh_dir / 'known_hosts'} "
            "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"),
        "ansible_python_interpreter": "/usr/bin/python3",
    }
