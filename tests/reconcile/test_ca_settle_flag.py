"""`--ca-settle`: the operator's setting for each CA rotation step's wait (app/pki/trust.py MIN_SETTLE..MAX_SETTLE),
from the flag through settings_for to the policy a pass steps the CA sets with."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import pytest

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, assert_every_leaf_trusted_by_every_bundle, small_cluster
from tests.reconcile.test_rotation import _held_everywhere, _issuer, _leaves, ca_states, force_replace
from tls_injector.cli import main
from tls_injector.cli.cluster import settings_for
from tls_injector.cli.parser import build_parser
from tls_injector.doctor import DoctorSettings
from tls_injector.kube import KubeApi
from tls_injector.pki import MAX_SETTLE, MIN_SETTLE, SETTLE
from tls_injector.reconcile.parts.reconciler import Reconciler, ReconcileSettings

PASS_EVERY = timedelta(seconds=10)  # the test clock's step between passes


def _settings(tmp_path: Path, *flags: str, command: str = "reconcile") -> ReconcileSettings:
    args = build_parser().parse_args([command, "--namespace", OWN_NS, "--cluster-domain", "cluster.local", *flags])
    return settings_for(args, resolv_conf=tmp_path / "absent")


def _settles(settings: ReconcileSettings) -> list[timedelta]:
    """The settle of every CA policy a pass steps: the workload CA's, the client CA's (built from it in
    app/reconcile/parts/trust.py, by its `settle`), the webhook CA's."""
    assert settings.webhook is not None
    return [settings.ca.settle, settings.workload_ca_policy.settle, settings.webhook.ca.settle]


def test_the_bounds_are_those_docs_reconcile_md_gives_and_the_default_lies_between() -> None:
    low, default, high = (int(t.total_seconds() // 60) for t in (MIN_SETTLE, SETTLE, MAX_SETTLE))
    assert MIN_SETTLE < SETTLE < MAX_SETTLE
    text = " ".join((Path(__file__).parents[2] / "docs" / "reconcile.md").read_text().split())
    assert f"settle: {default} minutes unless `reconcile --ca-settle DURATION`" in text
    assert f"from {low} minutes to {high}; anything else is refused at start" in text
    assert f"**at least {low} minutes**" in text
    assert f"**at most {high} minutes**" in text


def test_without_the_flag_every_ca_set_settles_for_the_default(tmp_path: Path) -> None:
    assert _settles(_settings(tmp_path)) == [SETTLE] * 3


@pytest.mark.parametrize("command", ["reconcile", "serve"])
@pytest.mark.parametrize(("value", "seconds"), [
    ("2m", 120.0),  # the lower bound itself
    ("120", 120.0),  # a bare number is seconds, as --timeout's
    ("150s", 150.0),
    ("2m30s", 150.0),
    ("5m", 300.0),
    ("599.5s", 599.5),
    ("10m", 600.0),  # the upper bound itself
])
def test_a_settle_in_range_reaches_every_ca_policy(tmp_path: Path, command: str, value: str, seconds: float) -> None:
    assert _settles(_settings(tmp_path, "--ca-settle", value, command=command)) == [timedelta(seconds=seconds)] * 3


class _Read(Exception):
    pass


@pytest.mark.parametrize(("flags", "settle"), [((), SETTLE), (("--ca-settle", "150s"), timedelta(seconds=150))])
def test_doctor_judges_with_the_reconcilers_settle(kubeapi: Emulator, monkeypatch: pytest.MonkeyPatch,
                                                   flags: tuple[str, ...], settle: timedelta) -> None:
    """`doctor --ca-settle`, given as the reconciler's, is the settle its hub check (held root rotations,
    app/doctor/read.py) steps the roots with: what it hands the reading of the cluster."""
    import tls_injector.doctor

    handed = []

    def read(api: object, settings: DoctorSettings, **_: object) -> None:
        handed.append(settings)
        raise _Read

    monkeypatch.setattr(tls_injector.doctor, "read", read)
    with pytest.raises(_Read):
        main(["doctor", "--server", kubeapi.url, "--namespace", OWN_NS, "--cluster-domain", "cluster.local", *flags])
    assert [s.ca_settle for s in handed] == [settle]


@pytest.mark.parametrize("command", ["reconcile", "serve", "doctor"])
@pytest.mark.parametrize("value", ["1m59s", "10m1s"])
def test_every_command_taking_the_flag_refuses_one_past_each_bound(
        command: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--ca-settle", value])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        f"tls-injector {command}: error: argument --ca-settle: expected a settle from 2m")


@pytest.mark.parametrize("value", [
    "119", "1m59s", "119.999s",  # one past the lower bound
    "600.001", "10m1s", "11m",  # one past the upper bound
    "0", "0s", "-150", "", "soon", "1d", "150ss", "1" * 80,  # not a duration above zero at all
])
def test_a_settle_out_of_range_or_not_a_duration_is_one_line_and_exit_two(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["reconcile", "--once", "--ca-settle", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith("tls-injector reconcile: error: argument --ca-settle: expected "), err
    assert f'got "{value[:100]}' in last, err
    assert "Traceback" not in err


def test_an_out_of_range_settle_names_both_bounds_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["reconcile", "--once", "--ca-settle", "1m"])
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "argument --ca-settle: expected a settle from 2m (a kubelet's sync period plus its cache TTL at their "
        "defaults) to 10m (the CA rotation alert's wait), got \"1m\"")


def test_the_help_shows_the_default_and_the_bounds(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        main(["reconcile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--ca-settle DURATION how long each CA rotation step waits" in text
    assert "from 2m to 10m, why in docs/reconcile.md (default: 5m)" in text


def _signing_delay(emu: Emulator, settings: ReconcileSettings) -> timedelta:
    """Force a rotation, pass every PASS_EVERY of the test's clock, and return how long after the new CA was
    first in every bundle in use the first leaf signed by it appeared."""
    clock = Clock()

    def reconciler() -> Reconciler:
        return Reconciler(KubeApi(emu.api_client()), settings, clock=clock)

    assert reconciler().run_pass().converged
    (old,) = ca_states(emu)
    force_replace(emu)
    everywhere_at = None
    for _ in itertools.count():
        assert clock.now < Clock().now + timedelta(hours=1), "the new CA never signed"
        assert reconciler().run_pass().converged
        assert_every_leaf_trusted_by_every_bundle(emu, clock.now)
        new = next((fp for fp in ca_states(emu) if fp != old), None)
        if everywhere_at is None and new and all(new in held for held in _held_everywhere(emu)):
            everywhere_at = clock.now
        if everywhere_at is not None and any(_issuer(s).startswith(new or "-") for s in _leaves(emu)):
            return clock.now - everywhere_at
        clock.advance(PASS_EVERY)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("value", ["2m30s", "10m"])
def test_the_pass_steps_the_ca_with_the_settle_given(kubeapi: Emulator, tmp_path: Path, value: str) -> None:
    """The reconciler built from the flags (as `reconcile` builds it) signs with the new CA no sooner than
    the settle given after every bundle holds it, and within three passes of it (a pass sights the CA in
    every bundle the pass after the one that wrote them; TRUSTED_UNUSED, then TRUSTED_USED, then signing):
    the flag, not the default, is what the pass waited for (150 s is shorter than the default, 10 minutes
    longer, and each further than three passes from it)."""
    small_cluster(kubeapi, namespaces=2, per_namespace=2)
    settings = _settings(tmp_path, "--server", kubeapi.url, "--webhook-configurations=", "--ca-settle", value)
    assert settings.webhook is None  # the emulator has no webhook configurations to keep
    settle = settings.ca.settle
    delay = _signing_delay(kubeapi, settings)
    assert settle <= delay <= settle + 3 * PASS_EVERY, (settle, delay)
