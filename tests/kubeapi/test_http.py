"""The HTTP layer below the client: malformed requests, header spelling, unknown paths."""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit

from tests.kubeapi import Emulator


def connection(kubeapi: Emulator) -> http.client.HTTPConnection:
    url = urlsplit(kubeapi.url)
    return http.client.HTTPConnection(url.hostname or "", url.port, timeout=5)


def test_a_malformed_request_line_is_400_and_the_server_keeps_serving(kubeapi: Emulator) -> None:
    url = urlsplit(kubeapi.url)
    with socket.create_connection((url.hostname or "", url.port or 0), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    conn = connection(kubeapi)
    conn.request("GET", "/api/v1/namespaces/default")
    assert conn.getresponse().status == 200
    conn.close()


def test_header_names_are_case_insensitive(kubeapi: Emulator) -> None:
    kubeapi.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})
    conn = connection(kubeapi)
    body = json.dumps({"data": {"k": "v"}})
    conn.putrequest("PATCH", "/api/v1/namespaces/default/configmaps/c")
    conn.putheader("content-type", "application/merge-patch+json; charset=utf-8")
    conn.putheader("content-length", str(len(body)))
    conn.endheaders(body.encode())
    answer = conn.getresponse()
    assert answer.status == 200
    assert json.loads(answer.read())["data"] == {"k": "v"}
    conn.close()


def test_unknown_paths_and_malformed_bodies_get_status_answers(kubeapi: Emulator) -> None:
    conn = connection(kubeapi)
    for method, path, body, code in [("GET", "/apis/nowhere/v1/things", None, 404),
                                     ("POST", "/api/v1/namespaces/default/configmaps", b"{not json", 400),
                                     ("PUT", "/api/v1/namespaces/default/configmaps", b"{}", 405),
                                     ("POST", "/api/v1/secrets", b"{}", 405)]:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        status = json.loads(answer.read())
        assert (answer.status, status["kind"], status["code"]) == (code, "Status", code)
    conn.close()
