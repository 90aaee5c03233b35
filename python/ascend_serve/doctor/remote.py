"""How ``ascend-serve doctor`` reaches a host: run a command, read a file.

A :class:`Transport` runs an argument list (or one fixed command string) on a host and returns
``(rc, stdout, stderr)``. :class:`LocalTransport` runs it here with :mod:`subprocess`;
:class:`SSHTransport` runs it over SSH with paramiko. SSH takes one command *string*, so every
argument is quoted with :func:`shlex.quote` (:func:`command_text`): no shell text is ever built
from unquoted input.

Host keys are checked: the operator's ``known_hosts`` file is loaded and a host that is not in it
is refused (:class:`HostKeyError`, naming the key's fingerprint) unless the operator accepts
unknown hosts, in which case the key is added to the given file and a warning is printed. A key
that differs from the known one is always refused.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import shlex
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import paramiko

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


class TransportError(RuntimeError):
    """The host could not be reached or the command could not be started there."""


class HostKeyError(TransportError):
    """The host's key is unknown (and unknown hosts are not accepted) or does not match."""


class AuthError(TransportError):
    """The SSH server refused every credential offered."""


class Transport(Protocol):
    """Runs commands on one host."""

    @property
    def name(self) -> str:
        """The host as the operator named it (``local`` for this machine)."""
        ...

    def run(self, command: Sequence[str] | str, timeout: float = DEFAULT_TIMEOUT_S
            ) -> tuple[int, str, str]:
        """Run an argument list (each item one argument) or a fixed command string."""
        ...

    def read_file(self, path: str) -> str | None:
        """A text file's content, or None where it does not exist or cannot be read."""
        ...

    def close(self) -> None:
        ...


def command_text(command: Sequence[str] | str) -> str:
    """The command as one shell line: an argument list has every argument quoted."""
    if isinstance(command, str):
        return command
    return " ".join(shlex.quote(str(arg)) for arg in command)


class LocalTransport:
    """This machine, through :mod:`subprocess` (an argument list runs without a shell)."""

    def __init__(self, name: str = "local") -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def run(self, command: Sequence[str] | str, timeout: float = DEFAULT_TIMEOUT_S
            ) -> tuple[int, str, str]:
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  check=False, errors="replace")
        except FileNotFoundError as exc:
            return 127, "", f"{argv[0]}: {exc.strerror}"
        except subprocess.TimeoutExpired:
            return 124, "", f"{command_text(command)}: no answer in {timeout:.0f} s"
        except OSError as exc:
            raise TransportError(f"cannot run {argv[0]}: {exc}") from exc
        return done.returncode, done.stdout, done.stderr

    def read_file(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def close(self) -> None:
        return None


# --- SSH ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SSHTarget:
    """``[user@]host[:port]`` as the operator wrote it."""

    host: str
    user: str | None = None
    port: int = 22

    @classmethod
    def parse(cls, text: str, default_port: int = 22) -> SSHTarget:
        user, at, rest = text.rpartition("@")
        if not at:
            user, rest = "", text
        if not rest or any(c.isspace() for c in text):
            raise ValueError(f"{text!r} is not [user@]host[:port]")
        port = default_port
        if rest.startswith("["):  # [v6-address]:port
            host, _, tail = rest[1:].partition("]")
            if tail.startswith(":"):
                port = _port(tail[1:], text)
        elif rest.count(":") == 1:
            host, _, port_text = rest.partition(":")
            port = _port(port_text, text)
        else:
            host = rest
        if not host:
            raise ValueError(f"{text!r} has no host name")
        return cls(host=host, user=user or None, port=port)

    def __str__(self) -> str:
        text = f"{self.user}@{self.host}" if self.user else self.host
        return text if self.port == 22 else f"{text}:{self.port}"


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{whole!r}: port {text!r} is not a number 1-65535")
    return int(text)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    """paramiko's RejectPolicy, with the key's fingerprint in the error."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise HostKeyError(
            f"host key of {hostname} is not in {self.known_hosts} ({key.get_name()} "
            f"{fingerprint(key)}): refusing to connect. Check the fingerprint with the host's "
            "owner, then add it (ssh-keyscan, or ssh once), or pass --accept-unknown-host to "
            "trust it and record it"
        )


class _AcceptAndRecord(paramiko.MissingHostKeyPolicy):
    """Accept an unknown host's key, say so, and append it to ``path``."""

    _lock = threading.Lock()

    def __init__(self, path: Path, warn: Callable[[str], None]) -> None:
        self.path = path
        self.warn = warn

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        with self._lock:  # hosts connect concurrently; one writer at a time
            self.path.parent.mkdir(parents=True, exist_ok=True)
            keys = paramiko.HostKeys()
            if self.path.exists():
                keys.load(str(self.path))
            keys.add(hostname, key.get_name(), key)
            keys.save(str(self.path))
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.warn(f"WARNING: accepted the unknown host key of {hostname} ({key.get_name()} "
                  f"{fingerprint(key)}) and added it to {self.path}")


class SSHTransport:
    """One SSH connection (paramiko) with host keys checked against a known_hosts file."""

    def __init__(
        self,
        target: SSHTarget,
        *,
        known_hosts: Path = DEFAULT_KNOWN_HOSTS,
        accept_unknown_host: bool = False,
        identity: Path | None = None,
        connect_timeout: float = 15.0,
        warn: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.target = target
        self.known_hosts = known_hosts.expanduser()
        self._client = paramiko.SSHClient()
        if self.known_hosts.exists():
            try:
                self._client.load_host_keys(str(self.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise HostKeyError(f"cannot read known_hosts {self.known_hosts}: {exc}") from exc
        policy: paramiko.MissingHostKeyPolicy = (
            _AcceptAndRecord(self.known_hosts, warn) if accept_unknown_host
            else _RejectUnknown(self.known_hosts)
        )
        self._client.set_missing_host_key_policy(policy)
        pkey: paramiko.PKey | None = None
        if identity is not None:
            try:
                pkey = paramiko.PKey.from_path(identity.expanduser())
            except paramiko.PasswordRequiredException as exc:
                raise AuthError(f"{identity} is encrypted: load it into ssh-agent instead of "
                                "--identity") from exc
            except (OSError, paramiko.SSHException, ValueError) as exc:
                raise AuthError(f"cannot read the key {identity}: {exc}") from exc
        try:
            self._client.connect(
                target.host,
                port=target.port,
                username=target.user,
                pkey=pkey,
                timeout=connect_timeout,
                banner_timeout=connect_timeout,
                auth_timeout=connect_timeout,
                allow_agent=True,
                look_for_keys=identity is None,
            )
        except HostKeyError:
            self._client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            self._client.close()
            raise HostKeyError(
                f"host key of {target} does not match {self.known_hosts}: got "
                f"{exc.key.get_name()} {fingerprint(exc.key)}, expected "
                f"{fingerprint(exc.expected_key)}. Someone may be intercepting the connection, "
                "or the host was reinstalled: check with its owner before fixing known_hosts"
            ) from exc
        except paramiko.AuthenticationException as exc:
            self._client.close()
            raise AuthError(f"{target}: authentication failed ({exc})") from exc
        except (OSError, paramiko.SSHException, EOFError) as exc:
            self._client.close()
            raise TransportError(f"cannot connect to {target}: {exc}") from exc

    @property
    def name(self) -> str:
        return str(self.target)

    def run(self, command: Sequence[str] | str, timeout: float = DEFAULT_TIMEOUT_S
            ) -> tuple[int, str, str]:
        text = command_text(command)
        try:
            stdin, stdout, stderr = self._client.exec_command(text, timeout=timeout)
            stdin.close()
            channel = stdout.channel
            # Read both streams to the end (a full stderr buffer would stall the command).
            err_chunks: list[bytes] = []
            reader = threading.Thread(target=lambda: err_chunks.append(stderr.read()),
                                      daemon=True)
            reader.start()
            out = stdout.read()
            reader.join(timeout)
            rc = channel.recv_exit_status()
        except TimeoutError:
            return 124, "", f"{text[:80]}: no answer in {timeout:.0f} s"
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise TransportError(f"{self.target}: the command could not be run: {exc}") from exc
        err = b"".join(err_chunks)
        return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def read_file(self, path: str) -> str | None:
        rc, out, _ = self.run(["cat", "--", path])
        return out if rc == 0 else None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()
