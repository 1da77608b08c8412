"""Instructions per /mutate request through the whole server, under callgrind: load-independent.

    python -m bench.instructions [--stream replica|new|replicaset|plan] [--requests 1000] [--connections 16] [--profile]

CPU time on a shared machine moves with everyone else's load; the instructions the server executes per
request do not. This starts `tls-injector serve` (log level info, as the ratio to the Go reference is
measured) under `valgrind --tool=callgrind` with instrumentation off, warms it up (the first requests,
the memo's first answer, the interpreter's caches), turns instrumentation on (`callgrind_control -i on`),
sends `--requests` reviews over `--connections` kept-alive TLS connections (each connection one request at
a time, as the apiserver's client and wrk send them), dumps the counts and stops the server. The figure is
user-space instructions per request of the server process: TLS, HTTP parsing, the handler and the answer,
plus the event loop's ticks during the run (a few hundred instructions a request); the kernel's share (the
socket calls) is outside it. `PYTHONHASHSEED=0`, so two runs of one build agree to about 0.5%.

The reviews are those the Go reference is measured with: a ReplicaSet's Pod CREATE of ~5.5 KB (two
containers and a native sidecar, 40 env values, probes, a projected token volume), each review its own uid
and token volume name (`replica`), each also a new template, one env value changed (`new`), or each
from a new ReplicaSet (`replicaset`: its pod-template-hash label, which the plan reads, so no answer is
remembered), or each with a sidecar of a new name (`plan`, the yardstick's worst case: a new plan, its
mounts and record, at every review).

`--profile` keeps the callgrind file and prints its top functions (inclusive) with callgrind_annotate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.admission import Pki, free_port, make_pki
from bench.loadgen import Connection

UID = "00000000-0000-4000-8000-000000000000"
TOKEN = "kube-api-access-zzzzz"
SHAPE = "SHAPE0000000"
PLAN = "planxxxxxxxx"  # a sidecar's name in the `plan` stream, new at every review (as ratio.py's)
# More than the memo's IDLE_AFTER (512): a stream in which no answer repeats is measured as it runs for
# good, the memo stepped aside (tls_injector/injection/answers.py), not in its first 512 reviews.
WARMUP = 600
POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
POD_RESOURCE = {"group": "", "version": "v1", "resource": "pods"}
# The apiserver's generateName alphabet, for the token volume's 5 characters.
_GENERATED = "bcdfghjklmnpqrstvwxz2456789"


def _container(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent", "resources": {}, **extra}


def review_template(*, plan: bool = False) -> bytes:
    """The review with UID, TOKEN and SHAPE placeholders, shaped as the Go reference's yardstick sends it;
    with `plan`, a second container named PLAN (a log shipper), as the yardstick's `plan` stream has."""
    mount = {"name": TOKEN, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    env = [{"name": f"SETTING_{i}", "value": SHAPE if i == 0 else f"value-{i}-" + "x" * 24} for i in range(40)]
    app = _container("app", "registry.example/web:1.0", env=env, volumeMounts=[mount],
                     resources={"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                     ports=[{"name": "https", "containerPort": 8443, "protocol": "TCP"}],
                     readinessProbe={"httpGet": {"path": "/ready", "port": 8443, "scheme": "HTTPS"},
                                     "periodSeconds": 5},
                     livenessProbe={"httpGet": {"path": "/live", "port": 8443, "scheme": "HTTPS"}, "periodSeconds": 10})
    init = [{"name": "migrate", "image": "registry.example/migrate:1", "volumeMounts": [mount]},
            {"name": "proxy", "image": "registry.example/proxy:1", "restartPolicy": "Always", "volumeMounts": [mount]}]
    token = {"name": TOKEN, "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}
    containers = [app]
    if plan:
        containers.append(_container(PLAN, "registry.example/log-shipper:2.1", volumeMounts=[mount],
                                     resources={"requests": {"cpu": "10m"}}))
    spec = {"containers": containers, "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "schedulerName": "default-scheduler", "enableServiceLinks": True,
            "initContainers": init, "volumes": [token],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                    "labelSelector": {"matchLabels": {"app": "web"}}}}]}},
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": "web-7d4b9c8f6d-",
        "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6d", "tls-injector.io/inject": "true"},
        "annotations": {"tls-injector.io/secret-name": "web-tls"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6d",
                             "uid": "3c5e1d2a-0000-4000-8000-000000000001", "controller": True,
                             "blockOwnerDeletion": True}]}, "spec": spec, "status": {}}
    review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {
        "uid": UID, "kind": POD_KIND, "resource": POD_RESOURCE, "requestKind": POD_KIND,
        "requestResource": POD_RESOURCE, "name": "", "namespace": "team-a", "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}
    return json.dumps(review).encode()


def stream(count: int, *, new: bool, start: int = 0, replica_set: bool = False, plan: bool = False) -> list[bytes]:
    """`count` reviews: each its own uid and token volume; with `new`, each also a new env value; with
    `replica_set`, each also from a new ReplicaSet (its pod-template-hash, which the plan reads); with
    `plan`, each with a container of a new name (the plan's mounts, its record: no answer fits)."""
    template = review_template(plan=plan)
    out = []
    for n in range(start, start + count):
        suffix = "".join(_GENERATED[(n // len(_GENERATED) ** i) % len(_GENERATED)] for i in range(5))
        body = template.replace(UID.encode(), f"{n:08x}-0000-4000-8000-{n:012x}".encode())
        body = body.replace(TOKEN.encode(), f"kube-api-access-{suffix}".encode())
        if new:
            body = body.replace(SHAPE.encode(), f"S{n:011d}".encode())
        if replica_set:
            body = body.replace(b"7d4b9c8f6d", f"{n:010x}".encode())
        if plan:
            body = body.replace(PLAN.encode(), f"p{n:011d}".encode())
        out.append(body)
    return out


def request_bytes(port: int, body: bytes) -> bytes:
    """As wrk sends it: Host, Content-Length, Content-Type."""
    return (f"POST /mutate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(body)}\r\n"
            f"Content-Type: application/json\r\n\r\n").encode() + body


async def session(port: int, context: ssl.SSLContext, warmup: list[bytes], measured: list[bytes], *,
                  connections: int, toggle: Callable[[str], None]) -> None:
    """The warm-up, then `toggle("on")`, the measured requests and `toggle("dump")`, on the same kept-alive
    connections (a handshake costs millions of instructions: none falls inside the measure)."""
    pool = [await Connection.open("127.0.0.1", port, context) for _ in range(connections)]
    await send(pool, warmup)
    toggle("on")
    await send(pool, measured)
    toggle("dump")
    for connection in pool:
        connection.close()


async def send(pool: list[Connection], requests: list[bytes]) -> None:
    """Every request answered 200 with a patch, spread over the connections, one at a time on each."""
    connections = len(pool)

    async def run(connection: Connection, mine: list[bytes]) -> None:
        for request in mine:
            status, answer = await connection.post(request)
            if status != 200 or b'"patch"' not in answer:
                raise RuntimeError(f"not a patch: {status} {answer[:200]!r}")

    await asyncio.gather(*(run(c, requests[i::connections]) for i, c in enumerate(pool)))


def ready(port: int, context: ssl.SSLContext, process: subprocess.Popen[bytes], seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            asyncio.run(asyncio.wait_for(_probe(port, context), 10))
            return
        except (TimeoutError, OSError):
            time.sleep(0.5)
    raise RuntimeError("server not ready")


async def _probe(port: int, context: ssl.SSLContext) -> None:
    connection = await Connection.open("127.0.0.1", port, context)
    connection.writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    await connection.reader.readuntil(b"\r\n\r\n")
    connection.close()


def _module(root: Path) -> str:
    """The import name the tree at root runs as: `tls_injector` (its link to app/), or `app` in a tree from
    before the package was named for itself, so an A/B against an older commit serves that commit's code."""
    return "tls_injector" if (root / "tls_injector").exists() else "app"


def measure(*, pki: Pki, workdir: Path, kind: str, requests: int, connections: int,
            root: Path, floor: bool = False) -> tuple[float, Path]:
    """(instructions per request, the callgrind file) for one run."""
    port = free_port()
    out = workdir / "callgrind.out.%p"
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, "-m", "bench.floor" if floor else _module(root), "serve",
            "--host", "127.0.0.1", "--port", str(port),
            "--tls-cert-file", str(pki.cert_file), "--tls-private-key-file", str(pki.key_file), "--no-reconciler"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(PYTHONHASHSEED="0", KUBECONFIG=str(workdir / "none"))
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    with (workdir / "serve.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
        try:
            ready(port, context, process)
            bodies = [request_bytes(port, b) for b in stream(WARMUP + requests, new=kind in ("new", "replicaset"),
                                                               replica_set=kind == "replicaset",
                                                               plan=kind == "plan")]

            def toggle(what: str) -> None:
                flag = ["-i", "on"] if what == "on" else ["-d"]
                subprocess.run(["callgrind_control", *flag, str(process.pid)], check=True, capture_output=True)

            asyncio.run(session(port, context, bodies[:WARMUP], bodies[WARMUP:], connections=connections,
                                toggle=toggle))
        finally:
            process.terminate()
            process.wait(120)
    dumps = sorted(workdir.glob(f"callgrind.out.{process.pid}.*"))
    if not dumps:
        raise RuntimeError("no callgrind dump")
    text = dumps[0].read_text(errors="replace")
    total = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
    if total is None:
        raise RuntimeError("no totals in the dump")
    return int(total.group(1)) / requests, dumps[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", choices=("replica", "new", "replicaset", "plan"), default="replica",
                        help="replica: one template; new: one env value new per review (as the Go yardstick's "
                             "new-template stream: the plan reads no env value, so these share an answer); "
                             "replicaset: a new ReplicaSet per review, planned every time; plan: a container of a "
                             "new name per review (ratio.py's plan stream), planned every time")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose app/ is served (another commit's tree, for an A/B)")
    parser.add_argument("--profile", action="store_true", help="print the top functions too")
    parser.add_argument("--floor", action="store_true",
                        help="serve bench.floor (the same server answering one fixed answer) instead")
    args = parser.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    pki = make_pki(workdir)
    per_request, dump = measure(pki=pki, workdir=workdir, kind=args.stream, requests=args.requests,
                                connections=args.connections, root=args.root, floor=args.floor)
    print(f"[{args.stream}{', floor' if args.floor else ''}] {per_request / 1000:.1f}k instructions per request "
          f"({args.requests} requests over {args.connections} connections; {args.root})")
    if args.profile:
        print(f"callgrind file: {dump}")
        annotate = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(dump)], check=False,
                                  capture_output=True, text=True)
        print("\n".join(annotate.stdout.splitlines()[:80]))


if __name__ == "__main__":
    main()
