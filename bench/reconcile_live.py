"""The long-running reconciler at scale, black-box: `tls-injector reconcile` (not --once) against a cluster
of N workloads in M namespaces, through the phases issue 42 sets figures for.

    python -m bench.reconcile_live --workloads 1000 --namespaces 100 [--apiserver]

The cluster is the API emulator in this process (tests/kubeapi, list + watch with bookmarks), or with
--apiserver the cluster tier's real kube-apiserver + etcd (bench/live_apiserver.py). The reconciler is
the real command in a child process; only what a cluster shows is read (objects, the API calls it
served, /proc), so the same harness measures today's controller and an informer-cache one.

Phases, each with its wall time, the reconciler's CPU (utime + stime from /proc/<pid>/stat) and the API
calls it made, counted server side by verb and resource:
  a. first convergence: every leaf Secret and trust bundle exists and no write for --settle seconds;
  b. a quiet minute (--quiet-seconds): lists, watches and writes (the goal: no list, no write);
  c. one new opted-in workload in a new opted-in namespace, then one in an existing namespace: time
     until its Secret (and the new namespace's bundle) exists, and the calls until then;
  d. a burst of --burst workload changes: pod templates get a new certificate duration, which each
     needs a re-issue (one write each), so convergence is visible on every affected Secret;
  e. a resync: CPU, lists and writes over --resync-window seconds (which must include one; with
     --resync S the reconciler is started with `--resync-period S`), else the quiet minute's CPU.
Then peak RSS (VmHWM) and the cost per change. Every wait is bounded by --timeout; a phase that times
out prints what is still missing and the run goes on.

Writes to Leases are the leader election's renewal (every 2 s whatever happens): they are counted
apart and do not break "no write". Events count as writes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.admission import stop
from bench.live_cluster import BUNDLE, PROFILE_ANNOTATION, Target, proc_cpu
from bench.reconcile import KINDS, OWN_NS, populate
from tests.kubeapi import Emulator, running_emulator
from tests.kubeapi.patches import MERGE_PATCH

DURATION_ANNOTATION = "tls-injector.io/duration"
# The burst's duration: within the default bounds (24h..8760h) and unlike the built-in 2160h, so every
# changed workload's certificate must be issued again and its Secret then records `duration=1000h`.
BURST_DURATION = "1000h"
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
LEASES = "leases.coordination.k8s.io"
KIND_RESOURCES = {kind: f"{kind.lower()}s.apps" for kind in KINDS}


class Cluster(Protocol):
    """What the phases need of a cluster; the reconciler's own API calls only, counted server side."""

    poll_seconds: float

    def reconciler_args(self) -> list[str]: ...
    def missing(self, targets: list[Target], *, exhaustive: bool) -> list[Target]: ...
    def new_calls(self) -> list[tuple[str, str, float]]: ...
    def add_namespace(self, name: str, labels: dict[str, str]) -> None: ...
    def add_workload(self, body: dict[str, Any]) -> None: ...
    def annotate_templates(self, workloads: list[tuple[str, str, str]], key: str, value: str) -> None: ...
    def server_cpu(self) -> dict[str, float]: ...


# ---- the emulator -----------------------------------------------------------------------------------


class EmulatorCluster:
    """The emulator in this process. The harness's own reads and writes go straight to the store, so the
    request log holds the reconciler's calls only; its server CPU is this process's (emulator + harness)."""

    poll_seconds = 0.1

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self._seen = 0
        # Emulator.resource scans the resource table: once per name, not once per target per look.
        self._resources = {name: emu.resource(name) for name in ("secrets", "configmaps", *KIND_RESOURCES.values())}

    def reconciler_args(self) -> list[str]:
        return ["--server", self.emu.url]

    def missing(self, targets: list[Target], *, exhaustive: bool) -> list[Target]:
        """The targets not (yet) seen present. Not `exhaustive`: from the first absent one on, unlooked at,
        so that waiting for 100,000 Secrets costs each one look once present plus one look per poll (a
        look at all of them every poll measured a third of this process's time, taken from the emulator)."""
        if exhaustive:
            return [t for t in targets if not self._present(t)]
        for index, target in enumerate(targets):
            if not self._present(target):
                return targets[index:]
        return []

    def _present(self, target: Target) -> bool:
        found = self.emu.store.find(self._resources[target.resource], target.namespace, target.name)
        if found is None:
            return False
        return not target.needs or target.needs in (found.obj["metadata"].get("annotations") or {}).get(
            PROFILE_ANNOTATION, "")

    def new_calls(self) -> list[tuple[str, str, float]]:
        """(verb, resource, when): the emulator's log has no times, so a call's is the look's (0.1 s apart)."""
        log = self.emu.faults.log  # appended under the emulator's lock; a slice of a list is atomic
        fresh = log[self._seen:]
        self._seen += len(fresh)
        now = time.time()
        return [(r.verb, r.resource, now) for r in fresh]

    def add_namespace(self, name: str, labels: dict[str, str]) -> None:
        self.emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})

    def add_workload(self, body: dict[str, Any]) -> None:
        self.emu.add(body)

    def annotate_templates(self, workloads: list[tuple[str, str, str]], key: str, value: str) -> None:
        patch = {"spec": {"template": {"metadata": {"annotations": {key: value}}}}}
        for kind, namespace, name in workloads:
            res = self._resources[KIND_RESOURCES[kind]]
            self.emu.store.patch(res, namespace, name, content_type=MERGE_PATCH, body=patch)

    def server_cpu(self) -> dict[str, float]:
        return {"emulator+harness": time.process_time()}


# ---- the reconciler -----------------------------------------------------------------------------------


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Reconciler:
    process: subprocess.Popen[bytes]
    log: Path
    started: float
    last_cpu: float = 0.0

    @property
    def cpu(self) -> float:
        """Its CPU so far; once it has exited (and been reaped), the last figure read."""
        with suppress(FileNotFoundError, ProcessLookupError):
            self.last_cpu = proc_cpu(self.process.pid)
        return self.last_cpu

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_reconciler(cluster: Cluster, folder: Path, *, resync: float | None) -> Iterator[Reconciler]:
    command = [sys.executable, "-m", "tls_injector", "reconcile", *cluster.reconciler_args(), "--namespace", OWN_NS,
               "--log-level", "warning", "--metrics-port", "0"]
    if resync is not None:
        command += ["--resync-period", f"{resync:g}s"]
    log = folder / "reconciler.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield Reconciler(process, log, time.monotonic())
    finally:
        stop(process)


# ---- measuring ------------------------------------------------------------------------------------


@dataclass
class Window:
    """What the reconciler did from `open_window` on: calls by (verb, resource), CPU, wall."""

    cluster: Cluster
    reconciler: Reconciler
    started: float = field(default_factory=time.monotonic)
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    last_write: float = 0.0  # time.monotonic() of the look that saw the last write (the settle counts from it)
    wrote_at: float | None = None  # seconds from `started` to the last write, by the server's clock
    first_wrote_at: float | None = None  # ... to the first
    cpu0: float = 0.0
    server0: dict[str, float] = field(default_factory=dict)

    def drain(self) -> None:
        """Take the calls served since the last look; a write (not a Lease renewal) moves `last_write`."""
        for verb, resource, at in self.cluster.new_calls():
            self.calls[(verb, resource)] += 1
            if verb in WRITES and resource != LEASES:
                self.last_write = time.monotonic()
                # The wall clock at `started`, from the monotonic one: the server's times are wall times.
                self.wrote_at = at - (time.time() - (time.monotonic() - self.started))
                if self.first_wrote_at is None:
                    self.first_wrote_at = self.wrote_at

    def cpu(self) -> float:
        return self.reconciler.cpu - self.cpu0

    def server(self) -> dict[str, float]:
        now = self.cluster.server_cpu()
        return {name: now[name] - self.server0.get(name, 0.0) for name in now}

    def by_verb(self) -> Counter[str]:
        verbs: Counter[str] = Counter()
        for (verb, _), n in self.calls.items():
            verbs[verb] += n
        return verbs

    def writes(self) -> int:
        return sum(n for (verb, res), n in self.calls.items() if verb in WRITES and res != LEASES)

    def lease_writes(self) -> int:
        return sum(n for (verb, res), n in self.calls.items() if verb in WRITES and res == LEASES)


def open_window(cluster: Cluster, reconciler: Reconciler, *, started: float | None = None) -> Window:
    cluster.new_calls()  # what came before is another phase's
    window = Window(cluster, reconciler, cpu0=reconciler.cpu, server0=cluster.server_cpu())
    if started is not None:  # the first phase counts from the reconciler's start, its CPU from zero
        window.started, window.cpu0 = started, 0.0
    return window


@dataclass
class Outcome:
    present: float | None  # seconds from the window's start until nothing was missing
    calls_present: int | None  # the reconciler's calls until then (drained at that poll), its Lease's apart:
    lease_present: int | None  # the leader election's renewals that fell in that time (2 calls every 2 s)
    converged: float | None  # ... until the last write before --settle quiet seconds, by the server's clock
                             # (the apiserver's audit log; the emulator's: the look's), None: timed out
    missing: set[Target]


def wait_for(window: Window, targets: set[Target], *, timeout: float, settle: float) -> Outcome:
    """Poll until every target is present and no write came for `settle` seconds, or `timeout`."""
    missing, present, calls, lease = sorted(targets), None, None, None
    deadline = window.started + timeout
    while time.monotonic() < deadline and window.reconciler.alive():
        window.drain()
        looked = time.monotonic()
        missing = window.cluster.missing(missing, exhaustive=False)
        now = time.monotonic()
        if not missing and present is None:
            present = now - window.started
            lease = sum(n for (_, resource), n in window.calls.items() if resource == LEASES)
            calls = sum(window.calls.values()) - lease
        if not missing and now - max(window.last_write, window.started) >= settle:
            # Converged at the last write (the server's clock where it has one); with none, when present.
            wrote = window.wrote_at if window.last_write >= window.started else None
            return Outcome(present, calls, lease, present if wrote is None else wrote, set())
        # The emulator shares this process's GIL, the apiserver its cores: looking takes at most a fifth.
        time.sleep(max(window.cluster.poll_seconds, 4 * (now - looked)))
    window.drain()
    return Outcome(present, calls, lease, None, set(window.cluster.missing(missing, exhaustive=True)))


def idle(window: Window, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and window.reconciler.alive():
        time.sleep(min(1.0, left))
        window.drain()
    window.drain()


# ---- the phases -----------------------------------------------------------------------------------


@dataclass
class Plan:
    workloads: int
    namespaces: int
    timeout: float = 900.0
    settle: float = 5.0
    quiet: float = 60.0
    burst: int = 1000
    resync_window: float | None = None
    controller_objects: bool = False


@dataclass
class Figures:
    """Each phase's printed line, and the numbers the summary needs."""

    lines: list[str] = field(default_factory=list)
    values: dict[str, float | None] = field(default_factory=dict)

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)


def leaf(namespace: str, workload: str, needs: str = "") -> Target:
    return Target("secrets", namespace, f"{workload}-tls", needs)


def bundle(namespace: str) -> Target:
    return Target("configmaps", namespace, BUNDLE)


def expected(plan: Plan) -> set[Target]:
    """What bench.reconcile.populate's cluster converges to: app<w>-tls in ns<w % M>, a bundle wherever a
    workload is."""
    secrets = {leaf(f"ns{w % plan.namespaces}", f"app{w}") for w in range(plan.workloads)}
    return secrets | {bundle(f"ns{n}") for n in range(min(plan.workloads, plan.namespaces))}


def describe(window: Window, outcome: Outcome | None = None) -> str:
    parts = []
    if outcome is not None:
        parts.append(f"present at {_s(outcome.present)} (the bench's look), converged at {_s(outcome.converged)} "
                     f"(its last write, by the server's clock; the first at {_s(window.first_wrote_at)})")
    parts.append(f"wall {time.monotonic() - window.started:.1f} s, reconciler CPU {window.cpu():.2f} s")
    parts.append(", ".join(f"{name} CPU {cpu:.2f} s" for name, cpu in window.server().items()))
    parts.append(f"{sum(window.calls.values())} calls {dict(sorted(window.by_verb().items()))}, "
                 f"{window.writes()} writes, {window.lease_writes()} lease writes")
    text = "; ".join(p for p in parts if p)
    if outcome is not None and outcome.missing:
        shown = ", ".join(f"{t.resource} {t.namespace}/{t.name}" for t in sorted(outcome.missing)[:5])
        text += f"; NOT CONVERGED (timed out, or the reconciler exited): {len(outcome.missing)} missing, e.g. {shown}"
    return text


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def first_convergence(cluster: Cluster, reconciler: Reconciler, plan: Plan, figures: Figures) -> None:
    window = open_window(cluster, reconciler, started=reconciler.started)
    outcome = wait_for(window, expected(plan), timeout=plan.timeout, settle=plan.settle)
    figures.say(f"a. first convergence: {describe(window, outcome)}")
    figures.say(f"   calls: {_by_resource(window)}")
    figures.values.update(first_s=outcome.converged, first_cpu=window.cpu())


def quiet_minute(cluster: Cluster, reconciler: Reconciler, plan: Plan, figures: Figures) -> None:
    window = open_window(cluster, reconciler)
    idle(window, plan.quiet)
    verbs = window.by_verb()
    figures.say(f"b. quiet {plan.quiet:g} s: {verbs['list']} lists, {verbs['watch']} watches, {window.writes()} "
                f"writes; {describe(window)}")
    if window.calls:
        figures.say(f"   calls: {_by_resource(window)}")
    figures.values.update(quiet_lists=verbs["list"], quiet_writes=window.writes(), quiet_cpu=window.cpu())


def new_workload(cluster: Cluster, reconciler: Reconciler, plan: Plan, figures: Figures) -> None:
    """One workload in a new opted-in namespace (its Secret and the namespace's bundle), then one in an
    existing namespace opted in by its pod label (its Secret)."""
    window = open_window(cluster, reconciler)
    cluster.add_namespace("live-new", {"tls-injector.io/inject": "enabled"})
    cluster.add_workload(_deployment("live-new", "live-new-app", {"app": "live-new-app"}))
    _new_workload_line("c1. new workload in a new namespace", window, {
        leaf("live-new", "live-new-app"), bundle("live-new")}, plan, figures, key="new_ns")
    existing = f"ns{1 % plan.namespaces}"
    window = open_window(cluster, reconciler)
    cluster.add_workload(_deployment(existing, "live-app-b", {"app": "live-app-b", "tls-injector.io/inject": "true"}))
    _new_workload_line("c2. new workload in an existing namespace", window, {leaf(existing, "live-app-b")}, plan,
                       figures, key="existing_ns")


def _new_workload_line(label: str, window: Window, targets: set[Target], plan: Plan, figures: Figures, *,
                       key: str) -> None:
    outcome = wait_for(window, targets, timeout=plan.timeout, settle=plan.settle)
    figures.say(f"{label}: {describe(window, outcome)}; {outcome.calls_present} calls until present "
                f"(and {outcome.lease_present} of the Lease's renewal)")
    figures.say(f"   calls until converged: {_by_resource(window)}")
    figures.values.update({f"{key}_s": outcome.present, f"{key}_calls": outcome.calls_present})


def burst(cluster: Cluster, reconciler: Reconciler, plan: Plan, figures: Figures) -> None:
    count = min(plan.burst, plan.workloads)
    chosen = [(KINDS[w % 3], f"ns{w % plan.namespaces}", f"app{w}") for w in range(count)]
    window = open_window(cluster, reconciler)
    cluster.annotate_templates(chosen, DURATION_ANNOTATION, BURST_DURATION)
    made = time.monotonic() - window.started
    targets = {leaf(ns, name, f"duration={BURST_DURATION}") for _, ns, name in chosen}
    outcome = wait_for(window, targets, timeout=plan.timeout, settle=plan.settle)
    figures.say(f"d. burst of {count} template changes (made in {made:.1f} s): {describe(window, outcome)}")
    figures.say(f"   calls: {_by_resource(window)}")
    calls = sum(window.calls.values())
    figures.values.update(burst_s=outcome.converged, burst_cpu=window.cpu(), burst_calls=calls, burst_n=count)
    figures.say(f"   per change: {window.cpu() / count * 1000:.1f} ms reconciler CPU, {calls / count:.2f} API calls, "
                f"{window.writes() / count:.2f} writes")


def resync(cluster: Cluster, reconciler: Reconciler, plan: Plan, figures: Figures) -> None:
    if plan.resync_window is None:
        figures.say(f"e. resync: not measured (no --resync-window); the quiet minute's CPU was "
                    f"{figures.values.get('quiet_cpu') or 0:.2f} s")
        return
    window = open_window(cluster, reconciler)
    idle(window, plan.resync_window)
    verbs = window.by_verb()
    figures.say(f"e. {plan.resync_window:g} s holding a resync: {verbs['list']} lists, {window.writes()} writes; "
                f"{describe(window)}")
    figures.say(f"   calls: {_by_resource(window)}")
    figures.values.update(resync_cpu=window.cpu(), resync_writes=window.writes())


PHASES: tuple[Callable[[Cluster, Reconciler, Plan, Figures], None], ...] = (
    first_convergence, quiet_minute, new_workload, burst, resync)


def run_phases(cluster: Cluster, plan: Plan, folder: Path, *, resync_seconds: float | None = None) -> Figures:
    figures = Figures()
    with running_reconciler(cluster, folder, resync=resync_seconds) as reconciler:
        for phase in PHASES:
            if not reconciler.alive():
                figures.say(f"the reconciler exited with {reconciler.process.returncode}:\n{reconciler.tail()}")
                break
            phase(cluster, reconciler, plan, figures)
        rss = peak_rss_mib(reconciler.process.pid) if reconciler.alive() else None
        figures.values["rss_mib"] = rss
        figures.say(f"peak RSS of the reconciler: {'-' if rss is None else f'{rss:.0f} MiB'}")
        figures.say(log_summary(reconciler.log))
    return figures


def log_summary(log: Path) -> str:
    """The reconciler's log (JSON lines at --log-level warning): how many, and the most frequent messages."""
    messages: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = {"msg": line[:120]}
        if isinstance(entry, dict):
            detail = str(entry.get("resource") or entry.get("error") or "")[:80]
            messages[f"{entry.get('level', '?')}: {entry.get('msg', '')}" + (f" ({detail})" if detail else "")] += 1
    top = "; ".join(f"{n}x {text}" for text, n in messages.most_common(6))
    return f"reconciler log: {sum(messages.values())} lines" + (f": {top}" if top else "")


def _by_resource(window: Window) -> str:
    return ", ".join(f"{verb} {res}: {n}" for (verb, res), n in sorted(window.calls.items()))


def _deployment(namespace: str, name: str, pod_labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": pod_labels},
                                  "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}}}


# ---- the command ----------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--apiserver", action="store_true",
                        help="the cluster tier's kube-apiserver + etcd instead of the emulator")
    parser.add_argument("--timeout", type=float, default=900.0, help="the longest wait of each phase, seconds")
    parser.add_argument("--settle", type=float, default=5.0, help="no write for this long: converged")
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--burst", type=int, default=1000, help="workloads changed at once in phase d")
    parser.add_argument("--resync", type=float, help="start the reconciler with --resync-period RESYNC (seconds)")
    parser.add_argument("--controller-objects", action="store_true",
                        help="on the emulator, also each Deployment's ReplicaSet and Pod and each StatefulSet's Pod, "
                             "as kube-controller-manager adds them on the --apiserver runs")
    parser.add_argument("--resync-window", type=float,
                        help="seconds measured after the burst, to include one resync (off by default)")
    return parser.parse_args(argv)


def plan_of(args: argparse.Namespace) -> Plan:
    return Plan(args.workloads, args.namespaces, timeout=args.timeout, settle=args.settle, quiet=args.quiet_seconds,
                burst=args.burst, resync_window=args.resync_window, controller_objects=args.controller_objects)


def summary(plan: Plan, figures: Figures) -> str:
    v = figures.values

    def n(key: str, unit: str = "", digits: int = 1) -> str:
        value = v.get(key)
        return "-" if value is None else f"{value:.{digits}f}{unit}"

    return (f"| {plan.workloads} / {plan.namespaces} | {n('first_s', ' s')} | {n('rss_mib', ' MiB', 0)} | "
            f"{n('quiet_lists', '', 0)} lists, {n('quiet_writes', '', 0)} writes | {n('new_ns_s', ' s')}, "
            f"{n('new_ns_calls', ' calls', 0)} | {n('existing_ns_s', ' s')}, {n('existing_ns_calls', ' calls', 0)} | "
            f"{n('burst_s', ' s')} | {n('resync_cpu', ' s', 2)} |")


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    plan = plan_of(args)
    with tempfile.TemporaryDirectory(prefix="reconcile-live-") as tmp:
        folder = Path(tmp)
        context: AbstractContextManager[Cluster]
        if args.apiserver:
            from bench.live_apiserver import running_apiserver
            context = running_apiserver(folder, workloads=plan.workloads, namespaces=plan.namespaces)
        else:
            context = running_populated_emulator(plan)
        with context as cluster:
            figures = run_phases(cluster, plan, folder, resync_seconds=args.resync)
    print("| workloads / namespaces | first convergence | peak RSS | quiet minute | new workload, new namespace | "
          "new workload, existing namespace | burst converged | resync CPU |")
    print(summary(plan, figures))


@contextmanager
def running_populated_emulator(plan: Plan) -> Iterator[EmulatorCluster]:
    # Bookmarks every 60 s, as the real apiserver sends them about once a minute.
    with running_emulator(seed=0, bookmark_interval=60.0) as emu:
        started = time.perf_counter()
        populate(emu, workloads=plan.workloads, namespaces=plan.namespaces, controller_objects=plan.controller_objects)
        extra = " with their ReplicaSets and Pods" if plan.controller_objects else ""
        print(f"cluster: {plan.workloads} workloads{extra} in {plan.namespaces} namespaces (emulator), populated in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        yield EmulatorCluster(emu)


if __name__ == "__main__":
    main()
