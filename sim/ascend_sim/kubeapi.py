"""A Kubernetes API stand-in with Node objects only, for the k8s_node role's fault taint tests.

Test infrastructure (standard library only), not a cluster: it serves what ``kubectl get node``
and ``kubectl taint node`` need over plain HTTP on loopback, and nothing else:

- discovery: ``GET /api`` (APIVersions), ``GET /apis`` (an empty APIGroupList), ``GET /api/v1``
  (an APIResourceList with ``nodes``), the legacy forms of the Kubernetes API's discovery
  documents (kubernetes.io "Kubernetes API Concepts", "Discovery API");
- ``GET /api/v1/nodes/NAME``: a core/v1 Node (``metadata.name``, ``spec.taints``, each taint
  ``key``, ``value``, ``effect``; kubernetes.io API reference "Node v1 core", "Taint v1 core"),
  404 with a ``Status`` object (reason ``NotFound``) for a node it does not hold;
- ``PATCH /api/v1/nodes/NAME`` with a strategic-merge or merge patch of ``spec.taints`` (the
  list has no merge key, so a patch replaces it whole; null removes it), which is what
  ``kubectl taint`` sends.

    python3 -m ascend_sim.kubeapi STATE_DIR --node NAME [--node NAME ...]

writes ``STATE_DIR/kubeconfig`` (server ``http://127.0.0.1:PORT``), keeps the nodes in
``STATE_DIR/nodes.json`` and logs every request as one JSON line (method, path, status) to
``STATE_DIR/requests.jsonl``, so that tests count the writes.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
  - name: stand-in
    cluster:
      server: http://127.0.0.1:{port}
contexts:
  - name: stand-in
    context:
      cluster: stand-in
      user: stand-in
current-context: stand-in
users:
  - name: stand-in
    user: {{}}
"""

RESOURCES = {
    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
    "resources": [{"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node",
                   "verbs": ["get", "list", "patch", "update"], "shortNames": ["no"]}],
}


def node_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": "1", "labels": {}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def merge(target: Any, patch: Any) -> Any:
    """A merge patch (RFC 7386); lists are replaced whole, as spec.taints is under a strategic
    merge patch (it has no patchMergeKey). ``$``-directives are not used on nodes' taints."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class Server(ThreadingHTTPServer):
    def __init__(self, state: Path, nodes: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.state = state
        self.lock = threading.Lock()
        store = state / "nodes.json"
        if not store.exists():
            store.write_text(json.dumps({n: node_object(n) for n in nodes}))

    def nodes(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state / "nodes.json").read_text())
        return data

    def save(self, nodes: dict[str, Any]) -> None:
        (self.state / "nodes.json").write_text(json.dumps(nodes, indent=1))

    def record(self, method: str, path: str, status: int) -> None:
        with (self.state / "requests.jsonl").open("a") as fh:
            fh.write(json.dumps({"method": method, "path": path, "status": status}) + "\n")


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to requests.jsonl instead."""

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.server.record(self.command, self.path, status)

    def _not_found(self, what: str) -> None:
        self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "message": f'nodes "{what}" not found', "reason": "NotFound",
                          "details": {"name": what, "kind": "nodes"}, "code": 404})

    def _node_name(self) -> str | None:
        path = self.path.split("?", 1)[0]
        prefix = "/api/v1/nodes/"
        return path[len(prefix):] if path.startswith(prefix) and "/" not in path[len(prefix):] \
            else None

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/api":
            self._reply(200, {"kind": "APIVersions", "versions": ["v1"],
                              "serverAddressByClientCIDRs": [
                                  {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        elif path == "/apis":
            self._reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        elif path == "/api/v1":
            self._reply(200, RESOURCES)
        elif (name := self._node_name()) is not None:
            with self.server.lock:
                node = self.server.nodes().get(name)
            if node is None:
                self._not_found(name)
            else:
                self._reply(200, node)
        else:
            self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "reason": "NotFound", "code": 404, "message": "not served here"})

    def do_PATCH(self) -> None:
        name = self._node_name()
        length = int(self.headers.get("Content-Length") or 0)
        patch = json.loads(self.rfile.read(length) or b"{}")
        with self.server.lock:
            nodes = self.server.nodes()
            if name is None or name not in nodes:
                self._not_found(str(name))
                return
            node = merge(nodes[name], patch)
            version = int(node["metadata"].get("resourceVersion", "1")) + 1
            node["metadata"]["resourceVersion"] = str(version)
            nodes[name] = node
            self.server.save(nodes)
        self._reply(200, node)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ascend_sim.kubeapi",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("state", type=Path, help="directory for kubeconfig, nodes and the log")
    parser.add_argument("--node", action="append", default=[], help="a node the API holds")
    args = parser.parse_args(argv)
    args.state.mkdir(parents=True, exist_ok=True)
    server = Server(args.state, args.node)
    (args.state / "kubeconfig").write_text(KUBECONFIG.format(port=server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
