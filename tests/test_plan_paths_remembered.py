"""The plan remembers the mount paths it normalised (plan._normpath): the same answer as normalising them
again, at most _NORMALISED_MAX paths, none longer than _NORMALISED_LENGTH."""

from __future__ import annotations

import posixpath

import pytest

from tls_injector.injection import plan
from tls_injector.injection.choices import InjectionOptions, InjectionRefused


def test_a_remembered_path_is_normalised_as_before() -> None:
    for path in ("/var/run/secrets/kubernetes.io/serviceaccount", "/etc/tls-injector/certs/", "//etc/./x/../y",
                 "relative/./path", "", "/"):
        assert plan._normpath(path) == posixpath.normpath(path)
        assert plan._normalised[path] == posixpath.normpath(path)
        assert plan._normpath(path) == posixpath.normpath(path)  # now found, not normalised again


def test_a_long_path_is_normalised_and_not_remembered() -> None:
    path = "/data/" + "x" * plan._NORMALISED_LENGTH + "/"
    assert plan._normpath(path) == posixpath.normpath(path)
    assert path not in plan._normalised


def test_the_memory_holds_at_most_its_bound() -> None:
    for n in range(plan._NORMALISED_MAX + 1):  # one past the bound
        assert plan._normpath(f"/m/{n}/") == f"/m/{n}"
        assert len(plan._normalised) <= plan._NORMALISED_MAX
    assert plan._normpath("/m/0/") == "/m/0"


def test_a_plan_reads_a_mount_path_alike_whether_it_was_remembered_or_not() -> None:
    # The first plan normalises the container's paths, the second finds them remembered: the same plan.
    options = InjectionOptions()
    for path in ("/etc/tls-injector/certs/", "/etc/./tls-injector//trust", "/etc/tls-injector/x/../certs"):
        plan._normalised.clear()
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "volumeMounts": [{"name": "mine", "mountPath": path}]},
            {"name": "b", "volumeMounts": [{"name": "mine", "mountPath": path}]}]}}
        with pytest.raises(InjectionRefused) as first:
            plan.plan_pod(pod, options=options)
        assert path in plan._normalised
        with pytest.raises(InjectionRefused) as second:
            plan.plan_pod(pod, options=options)
        assert str(first.value) == str(second.value)
        assert "already mounts volume 'mine'" in str(first.value)
    for container in pod["spec"]["containers"]:  # our own volume there: a mount found, the other one lacking
        container["volumeMounts"] = [{"name": "tls-injector-cert", "mountPath": "/etc/tls-injector/certs/"}]
    plan._normalised.clear()
    cold = plan.plan_pod(pod, options=options, ca_fingerprints=())
    assert [[m["mountPath"] for m in change.mounts] for change in cold.containers] == [["/etc/tls-injector/trust"]] * 2
    assert plan.plan_pod(pod, options=options, ca_fingerprints=()) == cold
