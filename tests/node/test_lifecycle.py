"""The webhook's own life as a workload, on the node: tls-injector installed from its image
(tests/node/install.py), then its pods rolled, killed, evicted and its leader lost while pods are
created continuously (tests/node/admissions.py: ~20 creates a second through the apiserver, each result
counted; a create refused because the webhook did not answer is a failure, as `failurePolicy: Fail`
makes it).

Each test leaves both Deployments whole (two Ready replicas, both webhook pods in the Service's
endpoints) for the tests after it. The numbers measured are printed (`-s`) and kept in
docs/node-tests.md.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from tests.node import disruption as d
from tests.node.admissions import RATE_PER_SECOND, Tally, with_load
from tests.node.harness import Node
from tests.node.install import IMAGE_BUILD_SECONDS, Installed
from tls_injector.kube.lease import RETRY_PERIOD

# The first test pays for the image build (cached by tools/image.py) and the install; each then has
# minutes (a rollout of two pods with a 30 s grace period, settling, cleanup).
pytestmark = pytest.mark.timeout(IMAGE_BUILD_SECONDS + 600)
NS = "node-lifecycle"
# Creates made before a disruption begins and after it is over: the baseline, and the tail that shows
# admissions are whole again.
BEFORE_SECONDS = 3.0
AFTER_SECONDS = 3.0


@pytest.fixture(scope="module")
def lifecycle_namespace(node: Node, installed: Installed) -> str:
    node.kubectl("create", "namespace", NS)
    node.cp.wait_for_service_account(NS, "default")
    return NS


@pytest.fixture
def whole(node: Node, lifecycle_namespace: str) -> list[dict[str, Any]]:
    """Both webhook pods serving and both reconcilers Ready before a test disturbs them."""
    d.until("the reconciler's two replicas Ready", lambda: d.reconciler_whole(node), node=node)
    return d.until("both webhook pods Ready and in the Service's endpoints", lambda: d.webhook_whole(node), node=node)


def names(found: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["name"] for p in found}


def test_a_rollout_restart_of_the_webhook_fails_no_admission(
        node: Node, lifecycle_namespace: str, whole: list[dict[str, Any]]) -> None:
    old = names(whole)
    with with_load(node, NS, "rollout") as load:
        time.sleep(BEFORE_SECONDS)
        began = time.monotonic()
        node.kubectl("rollout", "restart", "deployment/tls-injector", "-n", d.NS)
        node.kubectl("rollout", "status", "deployment/tls-injector", "-n", d.NS, "--timeout=240s", timeout=260)
        # The rollout is "complete" once the new pods are available; the old ones still drain (preStop,
        # then the server's drain): the load runs until they are gone.
        d.until("the old webhook pods gone", lambda: not (names(d.pods(node, d.WEBHOOK)) & old) or None)
        final = d.until("the new webhook pods serving", lambda: d.webhook_whole(node), node=node)
        rolled = time.monotonic() - began
        time.sleep(AFTER_SECONDS)
        tally = Tally.of(load.stop())
    print(f"\n{tally.line('rollout restart')}; the rollout took {rolled:.1f} s")
    assert not names(final) & old
    expected = RATE_PER_SECOND * (rolled + BEFORE_SECONDS + AFTER_SECONDS)
    assert tally.made >= 0.8 * expected, tally.line("the pace was not kept")
    assert not tally.failed, f"{tally.line('rollout restart')}, after the restart:\n{tally.failures_shown(began)}"


def test_a_webhook_pod_killed_with_sigkill_fails_only_the_calls_routed_to_it_until_it_leaves_the_endpoints(
        node: Node, lifecycle_namespace: str, whole: list[dict[str, Any]]) -> None:
    victim, other = whole
    restarts = victim["status"]["containerStatuses"][0]["restartCount"]
    with with_load(node, NS, "sigkill") as load:
        time.sleep(BEFORE_SECONDS)
        killed = time.monotonic()
        d.kill_container(node, victim)
        out = d.until("the killed pod out of the Service's endpoints",
                      lambda: victim["metadata"]["name"] not in d.serving_endpoints(node) or None, every=0.05)
        left_endpoints = time.monotonic() - killed

        def restarted() -> bool:
            found = [p for p in d.pods(node, d.WEBHOOK) if p["metadata"]["name"] == victim["metadata"]["name"]]
            return bool(found) and found[0]["status"]["containerStatuses"][0]["restartCount"] > restarts
        d.until("the killed container restarted", restarted, node=node)
        d.until("both webhook pods serving again", lambda: d.webhook_whole(node), node=node)
        recovered = time.monotonic() - killed
        time.sleep(AFTER_SECONDS)
        outcomes = load.stop()
    tally = Tally.of(outcomes)
    during = Tally.of([o for o in outcomes if killed <= o.sent <= killed + recovered])
    print(f"\n{tally.line('SIGKILL of one webhook pod')}; out of the endpoints after {left_endpoints:.1f} s, "
          f"both serving again after {recovered:.1f} s; {during.line('while it was down')}; after the kill:\n"
          f"{tally.failures_shown(killed, limit=40)}")
    assert out
    # Only the window after the kill may fail (a create still waiting for its answer when the kill came
    # included), and only because the webhook did not answer: the apiserver reached a pod with no
    # listener, or a connection the kill cut (failurePolicy Fail).
    assert all(o.sent + o.seconds >= killed for o in tally.failed), tally.failures_shown(killed)
    assert all("failed calling webhook" in o.message for o in tally.failed), tally.failures_shown(killed)
    # Admissions went on through the other replica meanwhile, and every one after the kill's window did.
    assert len(during.failed) < during.made, during.line("nothing was admitted while one pod was down")
    settled = killed + left_endpoints + 2.0  # kube-proxy's sync (its minSyncPeriod, 1 s) after the endpoints
    assert all(o.sent <= settled for o in tally.failed), tally.failures_shown(killed)
    assert other["metadata"]["name"] in d.serving_endpoints(node)


def test_a_second_eviction_while_one_webhook_replica_is_down_is_refused_by_the_disruption_budget(
        node: Node, lifecycle_namespace: str, whole: list[dict[str, Any]]) -> None:
    d.until("the budget to allow one disruption",
            lambda: d.pdb_status(node).get("disruptionsAllowed") == 1 or None, node=node)
    first, second = sorted(names(whole))
    with with_load(node, NS, "eviction") as load:
        time.sleep(BEFORE_SECONDS)
        first_at = time.monotonic()
        evicted = d.evict(node.cp, first)
        refused = d.evict(node.cp, second)
        # Once a replacement is Ready the budget allows one again: the refusal was the budget's.
        d.until("the replacement serving", lambda: d.webhook_whole(node), node=node)
        d.until("the budget to allow one disruption again",
                lambda: d.pdb_status(node).get("disruptionsAllowed") == 1 or None, node=node)
        evicted_later = d.evict(node.cp, second)
        final = d.until("both replacements serving",
                        lambda: (found := d.webhook_whole(node)) and not names(found) & {first, second} and found,
                        node=node)
        d.until("the evicted pods gone", lambda: not names(d.pods(node, d.WEBHOOK)) & {first, second} or None)
        time.sleep(AFTER_SECONDS)
        tally = Tally.of(load.stop())
    print(f"\nevictions: {first} -> {evicted[0]}, {second} at once -> {refused[0]} ({refused[1]}), "
          f"{second} once the replacement served -> {evicted_later[0]}; {tally.line('meanwhile')}")
    assert evicted[0] in (200, 201), evicted
    assert refused[0] == 429, refused
    assert "disruption budget" in refused[1], refused
    assert evicted_later[0] in (200, 201), evicted_later
    assert len(final) == 2
    assert not tally.failed, f"{tally.line('evictions')}, after the first:\n{tally.failures_shown(first_at)}"


def test_the_other_reconciler_takes_over_the_lease_when_the_leader_pod_is_killed_and_issues_what_was_asked(
        node: Node, lifecycle_namespace: str, whole: list[dict[str, Any]]) -> None:
    reconcilers = d.until("the reconciler's two replicas Ready", lambda: d.reconciler_whole(node), node=node)
    held = d.lease(node)
    duration = int(held["leaseDurationSeconds"])
    leader = d.holder_pod(held["holderIdentity"])
    assert leader in names(reconcilers), (held, names(reconcilers))
    [survivor] = names(reconcilers) - {leader}
    [leader_pod] = [p for p in reconcilers if p["metadata"]["name"] == leader]
    workload = f"after-{uuid.uuid4().hex[:6]}"
    # SIGKILL (the Lease is not released) and the pod deleted at once, so the kubelet does not start the
    # container again in the same pod: the leader is gone, as when its node dies.
    killed = time.monotonic()
    d.kill_container(node, leader_pod)
    node.kubectl("delete", "pod", leader, "-n", d.NS, "--grace-period=0", "--force", "--wait=false")
    node.kubectl("apply", "-f", "-", stdin=json.dumps(labelled_deployment(node, workload)))
    secret_path = f"/api/v1/namespaces/{NS}/secrets/{workload}-tls"
    issued_early = []

    def taken() -> dict[str, Any] | None:
        spec = d.lease(node)
        if spec["holderIdentity"] != held["holderIdentity"]:
            return spec
        issued_early.append(node.cp.get(secret_path)[0] == 200)
        return None
    new = d.until("another reconciler to take the Lease", taken, timeout=duration * 4, every=0.2, node=node)
    takeover = time.monotonic() - killed
    secret = d.until("the new leader to issue the workload's Secret",
                     lambda: ((found := node.cp.get(secret_path))[0] == 200 and found[1]) or None, timeout=120)
    issued = time.monotonic() - killed
    pod = d.until("the workload's pod running with its certificate", lambda: running(node, workload), timeout=120)
    again = names(d.until("the reconciler's two replicas Ready again", lambda: d.reconciler_whole(node),
                          node=node))
    taker = d.holder_pod(new["holderIdentity"])
    print(f"\nleader {leader} killed: {taker} ({'the survivor' if taker == survivor else 'its replacement'}) took "
          f"the Lease (leaseDurationSeconds {duration}) after {takeover:.1f} s; the Secret of {workload}, created "
          f"meanwhile, issued {issued:.1f} s after the kill")
    # Either replica not killed may take it: the survivor, or the pod the ReplicaSet started in the killed
    # one's place, which runs within seconds and is as much a candidate (a CI run saw it win the race).
    assert taker != leader, (new, leader)
    assert taker in again, (new, again)
    assert survivor in again, (survivor, again)
    # A candidate takes a Lease it has seen unchanged for its whole duration (app/kube/lease.py): the
    # survivor first sees the last renewal within one retry period of it and checks every retry period;
    # the replacement first sees it after the kill, so never sooner.
    assert takeover <= duration + 2 * RETRY_PERIOD.total_seconds(), takeover
    assert takeover >= duration - RETRY_PERIOD.total_seconds(), f"taken before the Lease expired: {takeover}"
    assert not any(issued_early), "a Secret was issued while nobody held the Lease"
    created = d.parse_time(json.loads(secret)["metadata"]["creationTimestamp"])
    assert created >= d.parse_time(new["acquireTime"]).replace(microsecond=0), (created, new)
    assert "tls-injector.io/injected" in pod["metadata"]["annotations"]


def running(node: Node, app: str) -> dict[str, Any] | None:
    found = node.get_json(f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{app}")["items"]
    return next((p for p in found if p["status"].get("phase") == "Running" and d.is_ready(p)), None)


def labelled_deployment(node: Node, name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name, "tls-injector.io/inject": "true"}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                    {"name": "main", "image": node.busybox.name, "imagePullPolicy": "Never",
                     "command": ["sleep", "3600"]}]}}}}
