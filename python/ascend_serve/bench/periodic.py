"""A sampler that runs in a daemon thread during a load: every ``interval_s`` between ``start``
and ``stop`` (or a ``with`` block), and once at each end. The NPU telemetry sampler and the host
energy meters are two of them; each says what one sample is."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TypeVar

_S = TypeVar("_S", bound="PeriodicSampler")


class PeriodicSampler:
    """Calls :meth:`sample_once` every ``interval_s`` in a daemon thread named ``thread_name``;
    subclasses guard their state with ``_lock``."""

    thread_name = "sampler"

    def __init__(self, interval_s: float, what: str) -> None:
        if interval_s <= 0:
            raise ValueError(f"the {what} interval must be > 0 s, got {interval_s}")
        self.interval_s = interval_s
        self._what = what
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample_once(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"the {self._what} is already running")
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.sample_once()

    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
