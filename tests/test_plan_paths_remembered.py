"""The plan remembers the mount paths it normalised (plan._normpath): the same answer as normalising them
again, at most _NORMALISED_MAX paths, none longer than _NORMALISED_LENGTH."""

from __future__ import annotations

import posixpath

from tls_injector.injection import plan


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
