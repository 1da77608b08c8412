"""The real `python -m tls_injector serve` as a subprocess: signals, exit status and /proc figures are its own."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.certs import ServingFiles

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ServeProcess:
    process: subprocess.Popen[bytes]
    port: int
    ca_file: Path
    stderr_file: Path

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.client_context(), timeout=10)

    def connect(self, timeout: float = 5) -> ssl.SSLSocket:
        """A verified TLS connection to the server, as the apiserver makes one."""
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.client_context().wrap_socket(raw, server_hostname="localhost")

    def stderr(self) -> str:
        return self.stderr_file.read_text(errors="replace")

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_process(tmp_path: Path, files: ServingFiles, *extra: str) -> Iterator[ServeProcess]:
    """Start the server on a free loopback port and wait until it answers; kill it if still running."""
    port = free_port()
    argv = [sys.executable, "-m", "tls_injector", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--tls-cert-file", str(files.cert_file), "--tls-private-key-file", str(files.key_file), *extra]
    stderr_file = tmp_path / f"serve-{port}.stderr"
    with stderr_file.open("wb") as stderr:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    running = ServeProcess(process, port, files.ca_file, stderr_file)
    try:
        _wait_ready(running)
        yield running
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def _wait_ready(server: ServeProcess) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}: {server.stderr()}")
        with contextlib.suppress(OSError), server.connect(timeout=1) as tls:
            tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            if tls.recv(64).startswith(b"HTTP/1.1 200"):
                return
        time.sleep(0.05)
    raise RuntimeError(f"server not ready after 20 s: {server.stderr()}")


def post_head(path: str, length: int, *, keep_alive: bool = True) -> bytes:
    connection = "keep-alive" if keep_alive else "close"
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Connection: {connection}\r\nContent-Length: {length}\r\n\r\n").encode()


def read_response(tls: ssl.SSLSocket) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length body; ConnectionError when the peer closes first."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = tls.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response")
        buffer += chunk
    head, _, body = buffer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = tls.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        body += chunk
    return int(head.split(b" ", 2)[1]), body
