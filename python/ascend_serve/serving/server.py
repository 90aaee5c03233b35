"""A vLLM server process started from a rendered launcher: start, wait for health, stop.

The launcher runs in a session of its own (``start_new_session``), so the whole process group
(vLLM and any engine workers it forks) is signalled together and nothing is left behind. While it
starts, its log is read as it grows with the vLLM log reader (``vllm_log_reader``, the collection's
``module_utils/vllm_log.py``): each startup phase is reported when reached, and a server that dies
or runs out of time is reported with the phase it was in, for how long, and the fix.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from ansible_collections.ascend_serve.fleet.plugins.module_utils.vllm_log import (
    StartLog,
    advice,
    describe,
)


class ServerError(RuntimeError):
    """The server died while starting, or never became healthy; carries the log's last lines and
    where the start stood: the phase (None before the first), seconds in it, the fix."""

    def __init__(self, message: str, log_tail: str, *, phase: str | None = None,
                 phase_seconds: float | None = None, fix: str = "", cause: str | None = None,
                 error: str | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.log_tail = log_tail
        self.phase = phase
        self.phase_seconds = phase_seconds
        self.fix = fix
        self.cause = cause
        self.error = error


class LogFollower:
    """Reads a server's log as it grows; remembers when (seconds since it began following) each
    startup phase was first seen."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock = clock
        self.started = clock()
        self.offset = 0
        self.log = StartLog()
        self.reached: dict[str, float] = {}
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def poll(self) -> list[dict[str, Any]]:
        """Read what the log grew by; the phases it newly reached, each with ``seconds``."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        new = self.log.feed(self._decoder.decode(data))
        now = round(self.clock() - self.started, 1)
        for entry in new:
            self.reached[entry["phase"]] = now
            entry["seconds"] = now
        return new

    def reading(self) -> dict[str, Any]:
        return self.log.reading()

    def phase_seconds(self) -> float:
        """Seconds in the current phase (since the start before the first phase)."""
        reading = self.log.reading()
        since = self.reached.get(reading["phase"], 0.0) if reading["phase"] else 0.0
        return max(0.0, self.clock() - self.started - since)

    def where(self) -> str:
        """``in phase "loading weights" (57/163 shards, ...) for 312 s``."""
        reading = self.log.reading()
        if reading["phase"] is None:
            return f"before its first startup phase ({self.phase_seconds():.0f} s)"
        title = reading["phase_title"]
        details = describe(reading)[len(title):]
        return f'in phase "{title}"{details} for {self.phase_seconds():.0f} s'

    def error(self, message: str, log_tail: str, timed_out: bool,
              unit_result: str | None = None) -> ServerError:
        """A :class:`ServerError` saying where the start stood, why, and the fix."""
        reading = self.log.reading()
        fix = advice(reading, timed_out=timed_out and not reading["start_failed"],
                     unit_result=unit_result)
        text = f"{message} {self.where()}"
        if reading["error"]:
            text += f"; error: {reading['error']}"
        return ServerError(f"{text}. Fix: {fix}", log_tail, phase=reading["phase"],
                           phase_seconds=round(self.phase_seconds(), 1), fix=fix,
                           cause=reading["cause"], error=reading["error"], timed_out=timed_out)


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
        self.follower = LogFollower(log_path)

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
        self.follower = LogFollower(self.log_path)
        try:
            self.follower.offset = self.log_path.stat().st_size  # only this start's lines
        except OSError:
            self.follower.offset = 0
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
        on_phase: Callable[[dict[str, Any]], None] | None = None,
    ) -> float:
        """Poll ``url`` until it answers 200; return the seconds it took. Each startup phase the
        log newly shows is passed to ``on_phase`` (the reader's entry, with ``seconds``).

        Raises :class:`ServerError` when the process exits first or ``timeout`` passes, naming
        the phase the start was in, for how long, and the fix.
        """
        start = time.monotonic()
        follower = self.follower

        def follow() -> None:
            for entry in follower.poll():
                if on_phase is not None:
                    on_phase(entry)

        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while True:
                elapsed = time.monotonic() - start
                follow()
                if not self.running():
                    code = self.proc.returncode if self.proc else None
                    time.sleep(0.2)  # the last lines a dying process wrote
                    follow()
                    follower.log.close()
                    raise follower.error(f"vLLM exited with status {code} while starting, "
                                         f"after {elapsed:.0f} s,", log_tail(self.log_path),
                                         timed_out=False)
                try:
                    if client.get(url).status_code == 200:
                        follow()
                        return elapsed
                except httpx.HTTPError:
                    pass
                if elapsed > timeout:
                    raise follower.error(f"vLLM was not healthy within {timeout:.0f} s:",
                                         log_tail(self.log_path), timed_out=True)
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
