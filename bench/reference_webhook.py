"""The reference webhook: the same JSON work with the standard library only (http.server + ssl + json).

It runs under the same conditions as tls-injector (same core, same TLS 1.2+ context, same keep-alive
client, same reviews) so the benchmark reports ratios, which survive a change of machine, instead of
absolute times, which do not. /mutate parses the review, derives the volumes and mounts the injector
adds and answers with a base64 JSON Patch; /validate parses the review and compares the TLS-bearing
part of the old and new pod templates. No per-request logging, like tls-injector at --log-level warning.

    python -m bench.reference_webhook --port 9443 --cert tls.crt --key tls.key
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

INJECT = "tls-injector.io/inject"
SECRET = "tls-injector.io/secret-name"


def mutate(request: dict[str, Any]) -> dict[str, Any]:
    pod = request.get("object") or {}
    meta = pod.get("metadata") or {}
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    if (meta.get("labels") or {}).get(INJECT) != "true":
        return response
    secret = (meta.get("annotations") or {}).get(SECRET) or "tls"
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/spec/volumes/-",
         "value": {"name": "tls-injector-certs", "secret": {"secretName": secret}}},
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "tls-injector-trust", "configMap": {
            "name": "tls-injector-trust-bundle"}}},
    ]
    for index, _ in enumerate(pod.get("spec", {}).get("containers", [])):
        for name, path in (("tls-injector-certs", "/etc/tls-injector/certs"),
                           ("tls-injector-trust", "/etc/tls-injector/trust")):
            ops.append({"op": "add", "path": f"/spec/containers/{index}/volumeMounts/-",
                        "value": {"name": name, "mountPath": path, "readOnly": True}})
    ops.append({"op": "add", "path": "/metadata/annotations/tls-injector.io~1injected", "value": secret})
    response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    response["patchType"] = "JSONPatch"
    return response


def validate(request: dict[str, Any]) -> dict[str, Any]:
    def tls(obj: dict[str, Any] | None) -> tuple[object, object]:
        meta = ((obj or {}).get("spec") or {}).get("template", {}).get("metadata") or {}
        return (meta.get("labels") or {}).get(INJECT), (meta.get("annotations") or {}).get(SECRET)

    old, new = tls(request.get("oldObject")), tls(request.get("object"))
    if old in ((None, None), new):
        return {"uid": request["uid"], "allowed": True}
    return {"uid": request["uid"], "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": "TLS can be enabled, not changed"}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the apiserver calls webhooks

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = mutate if self.path.startswith("/mutate") else validate
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": answer(review["request"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        body = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.cert, args.key)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
