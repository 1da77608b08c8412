"""The API emulator at the size of issue 42's figures: populate, list and watch at N workloads in M namespaces.

    python -m bench.kubeapi_scale --workloads 100000 --namespaces 10000

The cluster of bench.reconcile (the one bench.reconcile_live measures the reconciler on), in this process;
requests over HTTP as the reconciler makes them: whole lists read in pages of 500 (tls_injector.kube.api's page),
a label-selected list, a one-item list (where a watch starts), and a watch that must deliver --changes
events, made straight in the store, to an HTTP client. Wall times; the emulator's CPU is this process's.
"""

from __future__ import annotations

import argparse
import http.client
import threading
import time
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from bench.reconcile import KINDS, populate
from tests.kubeapi import Emulator, running_emulator
from tests.kubeapi.patches import MERGE_PATCH

PAGE = 500
WATCH_DEADLINE = 300.0  # seconds a watch may take to deliver every change before the run gives up


def get(emu: Emulator, path: str) -> dict[str, Any]:
    url = urlsplit(emu.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=120)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body: dict[str, Any] = orjson.loads(answer.read())
        return body
    finally:
        conn.close()


def timed_list(emu: Emulator, path: str, *, page: int = PAGE) -> str:
    started, cpu0 = time.perf_counter(), time.process_time()
    pages = items = 0
    token = ""
    for _ in range(1_000_000):  # pages; bounded by the cluster's size anyway
        sep = "&" if "?" in path else "?"
        body = get(emu, f"{path}{sep}limit={page}" + (f"&continue={quote(token)}" if token else ""))
        pages, items = pages + 1, items + len(body["items"])
        token = str((body.get("metadata") or {}).get("continue") or "")
        if not token or page == 1:
            break
    return (f"list {path} (limit {page}): {items} items in {pages} pages, {time.perf_counter() - started:.2f} s wall, "
            f"{time.process_time() - cpu0:.2f} s CPU")


def timed_watch(emu: Emulator, *, workloads: int, namespaces: int, changes: int) -> str:
    """A watch on Deployments from the current version; `changes` Deployments patched in the store; wall
    time until the client has read every MODIFIED event."""
    version = str(emu.resource_version)
    url = urlsplit(emu.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=WATCH_DEADLINE)
    conn.request("GET", f"/apis/apps/v1/deployments?watch=true&resourceVersion={version}&timeoutSeconds=600")
    answer = conn.getresponse()
    seen = threading.Event()
    counted = [0]

    def read() -> None:
        for _ in range(changes * 2 + 10):  # bookmarks are off: only our events come
            line = answer.readline()
            if not line:
                break
            if b'"MODIFIED"' in line[:30]:
                counted[0] += 1
                if counted[0] == changes:
                    break
        seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deployments = [w for w in range(workloads) if KINDS[w % 3] == "Deployment"][:changes]
    res = emu.resource("deployments")
    started, cpu0 = time.perf_counter(), time.process_time()
    for w in deployments:
        emu.store.patch(res, f"ns{w % namespaces}", f"app{w}", content_type=MERGE_PATCH,
                        body={"metadata": {"annotations": {"bench": "1"}}})
    made = time.perf_counter() - started
    seen.wait(WATCH_DEADLINE)
    conn.close()
    return (f"watch deployments: {len(deployments)} changes made in {made:.2f} s, {counted[0]} events read by the "
            f"client in {time.perf_counter() - started:.2f} s wall, {time.process_time() - cpu0:.2f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=1000)
    args = parser.parse_args()
    with running_emulator(seed=0, bookmark_interval=600.0) as emu:
        started, cpu0 = time.perf_counter(), time.process_time()
        populate(emu, workloads=args.workloads, namespaces=args.namespaces)
        print(f"populate {args.workloads} workloads in {args.namespaces} namespaces: "
              f"{time.perf_counter() - started:.2f} s wall, {time.process_time() - cpu0:.2f} s CPU", flush=True)
        for path, page in (("/apis/apps/v1/deployments", PAGE), ("/apis/apps/v1/statefulsets", PAGE),
                           ("/api/v1/namespaces", PAGE),
                           ("/api/v1/namespaces?labelSelector=" + quote("tls-injector.io/inject=enabled"), PAGE),
                           ("/apis/apps/v1/daemonsets", 1), ("/api/v1/namespaces/ns1/pods", PAGE)):
            print(timed_list(emu, path, page=page), flush=True)
        print(timed_watch(emu, workloads=args.workloads, namespaces=args.namespaces, changes=args.changes), flush=True)


if __name__ == "__main__":
    main()
