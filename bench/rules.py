"""CEL transition rules: time per request of the whole /validate handler, in-process.

    python -m bench.rules [--number N] [--repeat R]

Prints the median over R repeats of N calls each, in microseconds of this process's CPU time per call
(CPU time, not wall time, so other processes on a shared machine inflate the numbers less), for a Deployment UPDATE
(a realistic 3-container pod template) with the built-in rules:
- `handler`: the /validate route's handler on a decoded request — what /validate runs per request after
  its one decode;
  the same request again and again, so after the first call the rules' results come from the memo
  (as for repeated updates of one workload);
- `new values`: parse+handler on reviews whose pod-template metadata is new each time (a restartedAt
  annotation that counts), cycling through more than the memo keeps: every call evaluates the rules;
- `parse+handler`: the route's decode + handler, i.e. the whole request minus HTTP/TLS;
- `cel only`: one evaluation of the built-in rule's compiled expression on prepared `self`/`oldSelf`;
and the one-off cost of loading and compiling the built-in rules.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import orjson

from bench.timing import per_call_us
from tls_injector.admission import AdmissionResponse, Route
from tls_injector.offline.rulesfile import default_rule_set
from tls_injector.rules import make_validate_handler, self_value
from tls_injector.rules.memo import MEMO_ENTRIES

INJECT, SECRET = "tls-injector.io/inject", "tls-injector.io/secret-name"
RESTARTED = "kubectl.kubernetes.io/restartedAt"


def deployment(labels: dict[str, str], annotations: dict[str, str], image: str) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": f"{image}-{i}", "ports": [{"containerPort": 8080 + i}],
         "env": [{"name": f"VAR_{j}", "value": f"value-{j}"} for j in range(10)],
         "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
         "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080 + i}}}
        for i in range(3)
    ]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                     "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web", **labels}, "annotations": annotations},
                              "spec": {"containers": containers}}},
    }


def review_bytes(old: dict[str, Any], new: dict[str, Any]) -> bytes:
    request = {"uid": str(uuid.uuid4()), "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
               "operation": "UPDATE", "namespace": "shop", "name": "web", "object": new, "oldObject": old,
               "dryRun": False}
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def distinct_bodies(old: dict[str, Any], new: dict[str, Any]) -> list[bytes]:
    """More reviews than the memo keeps, each with its own template metadata (rule outcome unchanged)."""
    bodies = []
    for i in range(2 * MEMO_ENTRIES + 1):
        old_i, new_i = copy.deepcopy(old), copy.deepcopy(new)
        for obj in (old_i, new_i):
            obj["spec"]["template"]["metadata"]["annotations"][RESTARTED] = f"2026-11-23T05:{i // 60:02}:{i % 60:02}Z"
        bodies.append(review_bytes(old_i, new_i))
    return bodies


def handle_next(route: Route[Any], bodies: Iterator[bytes]) -> AdmissionResponse:
    return route.answer(next(bodies))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    started = time.perf_counter()
    rules = default_rule_set()
    load_ms = (time.perf_counter() - started) * 1000
    handler = make_validate_handler(rules)
    [rule] = [r for r in rules.rules if r.name == "workload-tls-transition"]  # the one the cases exercise
    on_x = ({INJECT: "true"}, {SECRET: "x-tls"})
    cases = {
        "unchanged TLS, new image (allowed)": (on_x, on_x),
        "enable TLS (allowed + warning)": (({}, {}), on_x),
        "swap secret (denied + message)": (on_x, ({INJECT: "true"}, {SECRET: "y-tls"})),
    }
    print(f"load + compile built-in rules: {load_ms:.1f} ms (once, at startup)")
    print(f"{'Deployment UPDATE':40} {'handler':>10} {'parse+handler':>14} {'new values':>10} {'cel only':>10}"
          "   (us per call)")
    size = 0
    for name, (old_state, new_state) in cases.items():
        old, new = deployment(*old_state, "app:1"), deployment(*new_state, "app:2")
        body = review_bytes(copy.deepcopy(old), copy.deepcopy(new))
        request = handler.decode(body)
        variables = {"self": self_value(new, rule.self_path), "oldSelf": self_value(old, rule.self_path)}
        cycle = itertools.cycle(distinct_bodies(old, new))
        calls: list[Callable[[], object]] = [
            partial(handler.handle, request),
            partial(handler.answer, body),
            partial(handle_next, handler, cycle),
            partial(rule.expression.evaluate, variables),
        ]
        timings = [per_call_us(call, number=args.number, repeat=args.repeat) for call in calls]
        print(f"{name:40} {timings[0]:10.1f} {timings[1]:14.1f} {timings[2]:10.1f} {timings[3]:10.1f}")
        size = len(body)
    print(f"review size: {size} bytes; median of {args.repeat} x {args.number} calls")


if __name__ == "__main__":
    main()
