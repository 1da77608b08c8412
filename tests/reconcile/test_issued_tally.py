"""Routine issuance in the running reconciler: at most one CertificatesIssued Event per namespace per window
(events.IssuedTally, posted by events.Outbox). The tally alone on a counted clock, then the outbox posting to
a recording API with a short window on the real clock."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler
from tls_injector import names
from tls_injector.kube import DEPLOYMENTS, Forbidden, KubeApi, Resource, Unavailable
from tls_injector.reconcile.core import events
from tls_injector.reconcile.core.events import HELD_LINES, IssuedTally, Outbox, issued_message, issued_ref
from tls_injector.reconcile.loop.controller import Controller

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# The outbox test's tally window: its twenty tells take ~0.2 s; seconds on a loaded machine.
WINDOW = 3.0


def lines(n: int, start: int = 0) -> list[str]:
    return [f"Secret app{i}-tls: certificate issued (missing)" for i in range(start, start + n)]


def test_a_quiet_namespace_is_told_at_once_and_what_follows_within_the_window_is_held() -> None:
    tally = IssuedTally(window=60.0)
    assert tally.add("a", lines(3), now=0.0) == (lines(3), 3)
    assert tally.next_due() is None
    assert tally.add("a", lines(1, 3), now=10.0) is None
    assert tally.add("a", lines(2, 4), now=59.0) is None
    assert tally.next_due() == 60.0
    assert tally.due(59.9) == []
    assert tally.due(60.0) == [("a", lines(3, 3), 3)]
    assert tally.next_due() is None
    # Told at 60: the next issuance within a minute of that is held again, after it told at once.
    assert tally.add("a", lines(1, 9), now=100.0) is None
    assert tally.due(120.0) == [("a", lines(1, 9), 1)]
    assert tally.add("a", lines(1, 10), now=180.0) == (lines(1, 10), 1)


def test_namespaces_have_windows_of_their_own() -> None:
    tally = IssuedTally(window=60.0)
    assert tally.add("a", lines(1), now=0.0) is not None
    assert tally.add("b", lines(1), now=30.0) is not None
    assert tally.add("a", lines(1, 1), now=31.0) is None
    assert tally.add("b", lines(1, 1), now=32.0) is None
    assert tally.next_due() == 60.0
    assert [ns for ns, _, _ in tally.due(60.0)] == ["a"]
    assert tally.next_due() == 90.0
    assert [ns for ns, _, _ in tally.due(90.0)] == ["b"]


def test_a_held_namespace_keeps_its_first_lines_and_counts_the_rest() -> None:
    tally = IssuedTally(window=60.0)
    tally.add("a", lines(1), now=0.0)
    for i in range(HELD_LINES + 40):
        assert tally.add("a", lines(1, 1 + i), now=1.0) is None
    [(_, kept, count)] = tally.due(60.0)
    assert (len(kept), count) == (HELD_LINES, HELD_LINES + 40)
    assert kept == lines(HELD_LINES, 1)
    message = issued_message(kept, count)
    assert message.startswith(f"{HELD_LINES + 40} certificates issued or renewed: Secret app1-tls")
    assert message.endswith(" more")
    assert len(message) <= 1024


def test_a_pass_of_many_is_told_at_once_with_its_count() -> None:
    tally = IssuedTally()
    told = tally.add("a", lines(1000), now=0.0)
    assert told is not None
    assert (told[1], len(told[0])) == (1000, HELD_LINES)
    assert issued_message(*told).startswith("1000 certificates issued or renewed: ")


def test_the_tally_forgets_namespaces_quiet_for_a_window() -> None:
    tally = IssuedTally(window=60.0)
    for i in range(10_000):
        tally.add(f"ns{i}", lines(1), now=0.0)
    assert tally.remembered() == 10_000
    tally.add("ns0", lines(1), now=30.0)  # held: remembered past the window until told
    tally.due(60.0)
    assert tally.remembered() == 1
    tally.due(120.0)
    assert tally.remembered() == 0


class Recording:
    """An API whose posts are kept with when they came."""

    def __init__(self) -> None:
        self.posted: list[tuple[float, str, str]] = []
        self.lock = threading.Lock()

    def post(self, resource: Resource, body: dict[str, Any], *, namespace: str) -> None:
        with self.lock:
            self.posted.append((time.monotonic(), namespace, str(body["message"])))


def test_the_outbox_posts_one_event_per_namespace_per_window_and_the_held_when_it_ends() -> None:
    api = Recording()
    # The window is far longer than the twenty tells take (~0.2 s quiet, seconds at worst on a loaded
    # machine): a window that ended among them would hold a different count, not what is tested.
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=WINDOW))
    started = time.monotonic()
    for i in range(20):  # a rollout in two namespaces: twenty keyed passes in 0.2 s
        box.tell_issued("a" if i % 2 else "b", lines(1, i), NOW)
        time.sleep(0.01)
    box.flush()
    assert time.monotonic() - started < WINDOW, "the tells outlasted the window: the counts below would differ"
    assert sorted(ns for _, ns, _ in api.posted) == ["a", "b"]  # the first of each, at once
    deadline = time.monotonic() + WINDOW + 10
    while len(api.posted) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(ns for _, ns, _ in api.posted) == ["a", "a", "b", "b"]
    held = [(at - started, message) for at, ns, message in api.posted[2:]]
    assert all(at >= WINDOW for at, _ in held)  # not before the window ends
    assert sorted(m.split(" ")[0] for _, m in held) == ["9", "9"]  # the other nine of each, in one Event


def test_the_running_loop_tells_a_rollout_in_two_events_not_one_per_certificate(kubeapi: Emulator) -> None:
    """The chain: watches, keyed passes, the writer, the outbox and its tally, on the emulator. A workload
    in a quiet namespace is told at once; six more created one by one (six keyed passes) are told together
    when the window ends; nothing is lost."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "team-a")
    api = KubeApi(kubeapi.api_client())
    rec = reconciler(kubeapi, Clock())
    loop = Controller(rec.api, rec, None, resync_seconds=3600, debounce_seconds=0.05, min_pass_gap_seconds=0.1,
                      watch_timeout_seconds=2, issued_window_seconds=10.0)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()

    def issued() -> list[str]:
        return [e["message"] for e in kubeapi.objects("events", "team-a") if e["reason"] == "CertificatesIssued"]

    def wait(condition: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "condition not met in time"
            time.sleep(0.05)

    try:
        api.create(DEPLOYMENTS, workload("web0"), namespace="team-a")
        wait(lambda: len(issued()) == 1)
        passes = loop.keyed_passes + loop.passes
        for i in range(1, 7):
            api.create(DEPLOYMENTS, workload(f"web{i}"), namespace="team-a")
            wait(lambda i=i: kubeapi.get("secrets", f"web{i}-tls", "team-a") is not None)  # type: ignore[misc]
        # one pass per workload, the case the window is for; a pass is counted when it ends, after its write
        wait(lambda: loop.keyed_passes + loop.passes - passes >= 6)
        # the window is not over: held (six workloads take about 2 s here, longer on a loaded machine)
        assert len(issued()) == 1
        wait(lambda: len(issued()) == 2)
        later = [m for m in issued() if m.startswith("6 certificates")]
        assert len(later) == 1
        assert all(f"Secret web{i}-tls" in later[0] for i in range(1, 7))
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def workload(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, names.INJECT_LABEL: "true"}},
                                  "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}}}


def test_a_closed_outbox_posts_nothing_more_not_even_what_its_tally_held_and_its_thread_ends() -> None:
    api = Recording()
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=0.5))
    box.tell_issued("a", lines(1, 0), NOW)  # told at once
    box.tell_issued("a", lines(1, 1), NOW)  # held for the window
    box.flush()
    assert len(api.posted) == 1
    threads = box._threads
    assert len(threads) == events.POSTERS
    box.close()
    for thread in threads:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in threads)
    time.sleep(1.0)  # past the window: a thread still running would have posted the held one by now
    box.emit((issued_ref("b"),), reason="CertificatesIssued", message="after close", kind="Normal", now=NOW)
    box.tell_issued("c", lines(1, 2), NOW)
    box.flush()  # returns: nothing is queued
    assert [ns for _, ns, _ in api.posted] == ["a"]


def test_a_replica_that_stops_leading_drops_what_its_tally_held() -> None:
    """Reconciler.forget (the loop's branch for a replica without the Lease) drops the held issuance: a
    replica that no longer leads writes no CertificatesIssued when the window ends; a later tell is told at
    once, as in a quiet namespace."""
    api = Recording()
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=0.5))
    box.tell_issued("a", lines(1, 0), NOW)  # told at once
    box.tell_issued("a", lines(1, 1), NOW)  # held for the window
    box.flush()
    assert [ns for _, ns, _ in api.posted] == ["a"]
    box.drop_held()
    time.sleep(1.0)  # past the window: the held one would have been posted by now
    assert [ns for _, ns, _ in api.posted] == ["a"]
    box.tell_issued("a", lines(1, 2), NOW)  # leading again: nothing remembered, told at once
    box.flush()
    assert [m.split(" ")[0] for _, _, m in api.posted] == ["1", "1"]
    box.close()


def test_the_reconcilers_forget_drops_its_outbox_tally(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    rec = reconciler(kubeapi, Clock())
    api = Recording()
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=0.5))
    rec.attach(None, box)
    box.tell_issued("a", lines(1, 0), NOW)
    box.tell_issued("a", lines(1, 1), NOW)
    box.flush()
    rec.forget()
    time.sleep(1.0)
    assert [ns for _, ns, _ in api.posted] == ["a"]
    box.close()


class Slow(Recording):
    """An apiserver that takes 50 ms to answer each Event, and counts how many it holds at once."""

    def __init__(self) -> None:
        super().__init__()
        self.at_once = self.most = 0

    def post(self, resource: Resource, body: dict[str, Any], *, namespace: str) -> None:
        with self.lock:
            self.at_once += 1
            self.most = max(self.most, self.at_once)
        time.sleep(0.05)
        super().post(resource, body, namespace=namespace)
        with self.lock:
            self.at_once -= 1


def test_the_outbox_posts_its_events_from_several_threads_and_closes_with_all_of_them_queued() -> None:
    """A burst's Events are not posted one answer after another (events.POSTERS at once), and a close with
    Events still queued ends every thread and lets a flush return."""
    api = Slow()
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=WINDOW))
    for n in range(4 * events.POSTERS):
        box.emit((issued_ref(f"ns{n}"),), reason="CertificateWaiting", message="m", kind="Warning", now=NOW)
    box.flush()
    assert len(api.posted) == 4 * events.POSTERS
    assert api.most == events.POSTERS
    for n in range(100):
        box.emit((issued_ref(f"later{n}"),), reason="CertificateWaiting", message="m", kind="Warning", now=NOW)
    threads = box._threads
    box.close()
    box.flush()  # what was still queued is dropped, not waited for (100 x 50 ms / 4 threads = 1.25 s)
    for thread in threads:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in threads)
    assert len(api.posted) < 4 * events.POSTERS + 100


class Refusing(Recording):
    """An apiserver that answers each Event's first `fails` tries with 503 (Unavailable), and every Event of
    namespace `denied` with 403 (Forbidden); it counts the tries of each namespace."""

    def __init__(self, fails: int) -> None:
        super().__init__()
        self.fails = fails
        self.tries: dict[str, int] = {}

    def post(self, resource: Resource, body: dict[str, Any], *, namespace: str) -> None:
        with self.lock:
            self.tries[namespace] = self.tries.get(namespace, 0) + 1
            tries = self.tries[namespace]
        if namespace == "denied":
            raise Forbidden("events is forbidden")
        if tries <= self.fails:
            raise Unavailable("POST /api/v1/namespaces/x/events: connection refused")
        super().post(resource, body, namespace=namespace)


def outbox_log(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, object, object]]:
    return [(r.levelname, r.getMessage(), getattr(r, "events", None), getattr(r, "posted_after_retry", None))
            for r in caplog.records if r.name == "tls_injector.events" and r.levelno >= logging.INFO]


def test_an_event_the_api_server_did_not_take_for_a_passing_cause_is_tried_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A 429, a 5xx or a connection refused loses no Event: each is tried again (the pauses doubling), and the
    pass's flush says once how many needed it."""
    monkeypatch.setattr(events, "EVENT_RETRY_PAUSE", 0.01)
    api = Refusing(fails=events.EVENT_TRIES - 1)
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=WINDOW))
    with caplog.at_level(logging.INFO, logger="tls_injector.events"):
        for n in range(3):
            box.emit((issued_ref(f"ns{n}"),), reason="CertificateWaiting", message="m", kind="Warning", now=NOW)
        box.flush()
        box.flush()  # nothing since: nothing said
    assert sorted(ns for _, ns, _ in api.posted) == ["ns0", "ns1", "ns2"]
    assert api.tries == {f"ns{n}": events.EVENT_TRIES for n in range(3)}
    assert outbox_log(caplog) == [("INFO", "events posted after a retry", 3, None)]
    box.close()


def test_an_event_refused_for_good_or_past_its_tries_is_counted_and_said_once_at_the_flush(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A 403 is not tried again; an API server still refusing after EVENT_TRIES tries loses the Event, and the
    flush says how many were lost and the last error, in one warning: not a line per Event, not nothing."""
    monkeypatch.setattr(events, "EVENT_RETRY_PAUSE", 0.01)
    api = Refusing(fails=events.EVENT_TRIES)
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=WINDOW))
    with caplog.at_level(logging.INFO, logger="tls_injector.events"):
        for ns in ("down", "denied"):
            box.emit((issued_ref(ns),), reason="CertificateWaiting", message="m", kind="Warning", now=NOW)
        box.flush()
    assert api.posted == []
    assert api.tries == {"down": events.EVENT_TRIES, "denied": 1}
    assert outbox_log(caplog) == [("WARNING", "events not recorded", 2, 0)]
    (said,) = [r for r in caplog.records if r.getMessage() == "events not recorded"]
    assert said.error.startswith(("Unavailable: ", "Forbidden: "))  # type: ignore[attr-defined]
    box.close()


class Hanging(Recording):
    """An apiserver that takes `seconds` to fail each Event with Unavailable (a request's timeout)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds, self.tries = seconds, 0

    def post(self, resource: Resource, body: dict[str, Any], *, namespace: str) -> None:
        with self.lock:
            self.tries += 1
        time.sleep(self.seconds)
        raise Unavailable("POST /api/v1/namespaces/x/events: read timed out")


def test_an_event_whose_try_hung_until_it_failed_is_not_tried_again(monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A try that failed only after EVENT_RETRY_WITHIN met a server that hangs (the request's timeout), not
    one that refuses: trying again would triple what a pass waits for its Events in an outage."""
    monkeypatch.setattr(events, "EVENT_RETRY_PAUSE", 0.01)
    monkeypatch.setattr(events, "EVENT_RETRY_WITHIN", 0.05)
    api = Hanging(0.1)
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=WINDOW))
    with caplog.at_level(logging.INFO, logger="tls_injector.events"):
        box.emit((issued_ref("hung"),), reason="CertificateWaiting", message="m", kind="Warning", now=NOW)
        box.flush()
    assert api.tries == 1
    assert outbox_log(caplog) == [("WARNING", "events not recorded", 1, 0)]
    box.close()


def test_a_close_ends_a_retry_pause_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread pausing before its Event's next try ends when the loop stops: a shutdown does not wait out
    the pauses of an API server that refuses everything."""
    monkeypatch.setattr(events, "EVENT_RETRY_PAUSE", 60.0)
    api = Refusing(fails=1000)
    box = Outbox(cast(KubeApi, api), tally=IssuedTally(window=WINDOW))
    box.emit((issued_ref("down"),), reason="CertificateWaiting", message="m", kind="Warning", now=NOW)
    deadline = time.monotonic() + 5
    while not api.tries and time.monotonic() < deadline:
        time.sleep(0.01)
    assert api.tries == {"down": 1}  # in its first pause, of a minute
    threads = box._threads
    closed = time.monotonic()
    box.close()
    for thread in threads:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in threads)
    assert time.monotonic() - closed < 10  # not the pause's minute
    assert api.tries == {"down": 1}
