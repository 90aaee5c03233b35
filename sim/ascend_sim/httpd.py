"""A static file server for model-mirror tests: HTTP Range support and a connection-drop fault.

Test infrastructure, standard library only (it also runs inside simulated nodes):

  python3 httpd.py DIR --port 8088 [--bind 127.0.0.1] [--log FILE] [--drop PATH=BYTES ...]

``--drop models/x/model.safetensors=4096`` sends the full Content-Length header but closes the
connection after 4096 bytes of that file, once: what a mirror does when a download breaks off.
Every request is logged as one JSON line (path, Range header, status, bytes sent).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
CHUNK = 1 << 16


class MirrorHandler(SimpleHTTPRequestHandler):
    server: MirrorServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr log; requests go to the JSON log instead."""

    def _record(self, status: int, sent: int) -> None:
        self.server.record(
            {"path": self.path, "range": self.headers.get("Range"), "status": status, "sent": sent}
        )

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            self._record(404, 0)
            return
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        match = RANGE.match(self.headers.get("Range", ""))
        if match:
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else size - 1
            if start >= size or end < start:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.end_headers()
                self._record(416, 0)
                return
            end = min(end, size - 1)
            status = 206
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        limit = self.server.take_drop(self.path.lstrip("/"))
        sent = 0
        with path.open("rb") as handle:
            handle.seek(start)
            while sent < length:
                want = min(CHUNK, length - sent)
                if limit is not None:
                    want = min(want, limit - sent)
                    if want <= 0:
                        break
                block = handle.read(want)
                if not block:
                    break
                self.wfile.write(block)
                sent += len(block)
        self._record(status, sent)
        if limit is not None:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)


class MirrorServer(ThreadingHTTPServer):
    def __init__(self, address: tuple[str, int], root: Path, log: Path | None,
                 drops: dict[str, int]) -> None:
        self.root = root
        self.log_path = log
        self.drops = dict(drops)
        self.lock = threading.Lock()
        super().__init__(address, lambda *a: MirrorHandler(*a, directory=str(root)))

    def take_drop(self, path: str) -> int | None:
        with self.lock:
            return self.drops.pop(path, None)

    def record(self, entry: dict[str, Any]) -> None:
        if self.log_path is None:
            return
        with self.lock, self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")


def parse_drops(items: list[str]) -> dict[str, int]:
    drops: dict[str, int] = {}
    for item in items:
        path, sep, count = item.rpartition("=")
        if not sep or not count.isdigit():
            raise SystemExit(f"--drop takes PATH=BYTES, not {item!r}")
        drops[path.lstrip("/")] = int(count)
    return drops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--port", type=int, default=8088)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--log", type=Path)
    parser.add_argument("--drop", action="append", default=[], metavar="PATH=BYTES")
    args = parser.parse_args(argv)
    server = MirrorServer((args.bind, args.port), args.dir.resolve(), args.log,
                          parse_drops(args.drop))
    if args.log is not None:
        args.log.parent.mkdir(parents=True, exist_ok=True)
    os.chdir(args.dir)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
