"""A made-up package index for the lock tests: PEP 691 JSON simple pages served from memory
through httpx's MockTransport, read by the project's own IndexReader."""

from __future__ import annotations

from typing import Any

import httpx

from ascend_serve.stack.index import SIMPLE_JSON, IndexReader


def index_reader(files: dict[str, list[dict[str, Any]]], *, status: int = 200,
                 host: str | None = None) -> tuple[IndexReader, list[str]]:
    """A reader of an index whose project pages list ``files`` (project -> its files' entries,
    ``filename`` and ``hashes``); a project it does not list answers 404, every page answers
    ``status`` when that is not 200, and with ``host`` any other host is unreachable. Returns the
    reader and the URLs it was asked for, in order."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if host is not None and request.url.host != host:
            raise httpx.ConnectError("unreachable from a test", request=request)
        asked.append(str(request.url))
        if status != 200:
            return httpx.Response(status)
        project = request.url.path.rstrip("/").rsplit("/", 1)[1]
        if project not in files:
            return httpx.Response(404)
        return httpx.Response(200, headers={"content-type": SIMPLE_JSON},
                              json={"meta": {"api-version": "1.1"}, "files": files[project]})

    return IndexReader(transport=httpx.MockTransport(handler)), asked
