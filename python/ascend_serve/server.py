"""A vLLM server process started from a rendered launcher: start, wait for health, stop.

The launcher runs in a session of its own (``start_new_session``), so the whole process group
(vLLM and any engine workers it forks) is signalled together and nothing is left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx


class ServerError(RuntimeError):
    """The server died while starting, or never became healthy; carries the log's last lines."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def last_line(path: Path) -> str:
    tail = log_tail(path, 1)
    return tail[-120:]


class ServerProcess:
    def __init__(self, launcher: Path, log_path: Path, env: Mapping[str, str] | None = None):
        self.launcher = launcher
        self.log_path = log_path
        self.env = dict(env) if env is not None else dict(os.environ)
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def in_run_dir(cls, script: str, run_dir: Path, api_key: str | None = None,
                   base_env: Mapping[str, str] | None = None) -> ServerProcess:
        """A server for the rendered launcher ``script``, written to ``run_dir/launch.sh``
        (0750) with its log in ``run_dir/vllm.log`` (emptied); the API key, if any, reaches
        vLLM only through ``VLLM_API_KEY`` in its environment, never its command line."""
        run_dir.mkdir(parents=True, exist_ok=True)
        launcher = run_dir / "launch.sh"
        launcher.write_text(script, encoding="utf-8")
        launcher.chmod(0o750)
        log_path = run_dir / "vllm.log"
        log_path.write_bytes(b"")
        env = dict(os.environ if base_env is None else base_env)
        env.pop("VLLM_API_KEY", None)
        if api_key:
            env["VLLM_API_KEY"] = api_key
        return cls(launcher, log_path, env)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("not started")
        return self.proc.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                ["/bin/bash", str(self.launcher)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True,
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def group_alive(self) -> bool:
        """Whether any process of the server's group is left."""
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # pragma: no cover - a foreign process reused the group id
            return True
        return True

    def wait_healthy(
        self,
        url: str,
        timeout: float,
        tick: Callable[[float], None] | None = None,
        interval: float = 1.0,
    ) -> float:
        """Poll ``url`` until it answers 200; return the seconds it took.

        Raises :class:`ServerError` when the process exits first or ``timeout`` passes.
        """
        start = time.monotonic()
        with httpx.Client(timeout=5.0) as client:
            while True:
                elapsed = time.monotonic() - start
                if not self.running():
                    code = self.proc.returncode if self.proc else None
                    raise ServerError(f"vLLM exited with status {code} while starting "
                                      f"(after {elapsed:.0f} s)", log_tail(self.log_path))
                try:
                    if client.get(url).status_code == 200:
                        return elapsed
                except httpx.HTTPError:
                    pass
                if elapsed > timeout:
                    raise ServerError(f"vLLM was not healthy within {timeout:.0f} s",
                                      log_tail(self.log_path))
                if tick is not None:
                    tick(elapsed)
                time.sleep(interval)

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM the whole group, SIGKILL what is left after ``grace`` s; return the exit code."""
        if self.proc is None:
            return None
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            if not self.group_alive():
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.proc.poll()
                if not self.group_alive():
                    break
                time.sleep(0.1)
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - killed above
            return None
