"""The API client builds no request path from a segment that is no name (docs/security.md, "Names a
tenant writes"): every resource the code defines, every call that puts data into a path, every kind of
bad segment. IllegalName (a KubeError) is raised before anything is sent; a legal name goes through to
the exact path. A new call or resource must join the table (the last two tests fail otherwise).

The client's ApiClient is replaced by a recorder that stops at the first thing a request does
(`param_serialize`): an empty record means no request was even built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from tls_injector.kube import (
    IllegalName,
    KubeApi,
    KubeError,
    Resource,
    api,
    cluster_trust_bundles,
    pod_certificate_requests,
)
from tls_injector.kubenames import (
    MAX_LABEL,
    MAX_SUBDOMAIN,
    label_problem,
    path_problem,
    path_segment_problem,
    subdomain_problem,
)

# Every Resource the code defines: the module's constants and one of each made by a function.
RESOURCES: list[Resource] = sorted(
    {*(v for v in vars(api).values() if isinstance(v, Resource)), pod_certificate_requests("v1"),
     cluster_trust_bundles("v1")}, key=lambda r: r.path())
# Segments no object name may be, each with a reason: path steps, separators, escapes, query and fragment,
# controls, spaces, DEL and non-ASCII, and the finding's own values.
BAD_SEGMENTS = ["", ".", "..", "a/b", "/", "../../../secrets", "../../team-b/secrets/x", "x/..", "%2e%2e", "a%2Fb",
                "a?b", "?watch=true", "a#b", "a\\b", "a\x00b", "a\nb", "a\rb", "a\tb", "a b", " a", "a\x7fb", "é",
                "a\u2215b", "\u2024\u2024"]
# A namespace must also be a DNS-1123 label (every namespace is one).
BAD_NAMESPACES = [*BAD_SEGMENTS, "Team-A", "team_a", "-a", "a-", "a.b", "a" * 64]
# Segments that go through: the path fence is looser than any kind's name rule (a ClusterTrustBundle holds ":"),
# each kind's own rule is checked where a name is read.
GOOD_NAMES = ["a", "web-tls", "a." + "b" * 251, "tls-injector.io:serving:cas", "0", "A-Z_ok"]
GOOD_NAMESPACES = ["a", "team-a", "0", "a" * 63]


class _Stop(Exception):
    """Raised by the recorder: the request was built, and is not sent anywhere."""


class _Recorder:
    def __init__(self) -> None:
        self.paths: list[tuple[str, str]] = []

    def param_serialize(self, method: str, resource_path: str, **_: Any) -> Any:
        self.paths.append((method, resource_path))
        raise _Stop


Call = Callable[[KubeApi, Resource, str, str | None], object]


def _body(resource: Resource, name: str, namespace: str | None) -> dict[str, Any]:
    meta = {"name": name, "resourceVersion": "1", **({"namespace": namespace} if namespace is not None else {})}
    return {"apiVersion": "v1", "kind": resource.kind, "metadata": meta}


# Every call that puts a name into a path: (call, does it take a name, does it take a namespace).
NAMED_CALLS: dict[str, Call] = {
    "get": lambda a, r, n, ns: a.get(r, n, namespace=ns),
    "delete": lambda a, r, n, ns: a.delete(r, n, namespace=ns),
    "replace": lambda a, r, n, ns: a.replace(r, _body(r, n, ns)),
    "overwrite": lambda a, r, n, ns: a.overwrite(r, _body(r, n, ns)),
    "replace_status": lambda a, r, n, ns: a.replace_status(r, _body(r, n, ns)),
}
# Every call that puts a namespace (and no name) into a path.
SCOPED_CALLS: dict[str, Call] = {
    "list_objects": lambda a, r, _, ns: a.list_objects(r, namespace=ns),
    "create": lambda a, r, n, ns: a.create(r, _body(r, n, ns), namespace=ns),
    "post": lambda a, r, n, ns: a.post(r, _body(r, n, ns), namespace=ns),
    "watch": lambda a, r, _, ns: a.watch(r, resource_version="1", namespace=ns),
}
# Calls whose path holds no data of anyone's: checked by `_check_path` all the same.
FIXED_CALLS = {"server_version", "server_date", "current_version"}
DATA_CALLS = {"served_resources"}  # group and version: the last fence (`_check_path`) holds them


def _api() -> tuple[KubeApi, _Recorder]:
    recorder = _Recorder()
    return KubeApi(recorder), recorder  # type: ignore[arg-type]  # the recorder stands in for ApiClient


def _ns(resource: Resource) -> str | None:
    return "team-a" if resource.namespaced else None


def _expected(resource: Resource, name: str | None, namespace: str | None, call: str) -> str:
    scope = f"/namespaces/{namespace}" if resource.namespaced else ""
    tail = f"/{name}" if name is not None else ""
    return f"{resource.prefix}{scope}/{resource.plural}{tail}" + ("/status" if call == "replace_status" else "")


def _refused(recorder: _Recorder, call: Callable[..., object], *args: Any) -> None:
    with pytest.raises(IllegalName):
        call(*args)
    assert recorder.paths == [], "a request was built"


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.kind)
@pytest.mark.parametrize("call", sorted(NAMED_CALLS))
def test_a_name_that_is_no_path_segment_is_refused_before_any_request(resource: Resource, call: str) -> None:
    for bad in BAD_SEGMENTS:
        client, recorder = _api()
        _refused(recorder, NAMED_CALLS[call], client, resource, bad, _ns(resource))


@pytest.mark.parametrize("resource", [r for r in RESOURCES if r.namespaced], ids=lambda r: r.kind)
@pytest.mark.parametrize("call", sorted({**NAMED_CALLS, **SCOPED_CALLS}))
def test_a_namespace_that_is_no_label_is_refused_before_any_request(resource: Resource, call: str) -> None:
    for bad in BAD_NAMESPACES:
        client, recorder = _api()
        _refused(recorder, {**NAMED_CALLS, **SCOPED_CALLS}[call], client, resource, "web", bad)


@pytest.mark.parametrize("resource", [r for r in RESOURCES if r.namespaced], ids=lambda r: r.kind)
@pytest.mark.parametrize("call", sorted(NAMED_CALLS))
def test_a_namespaced_object_named_without_its_namespace_is_refused(resource: Resource, call: str) -> None:
    client, recorder = _api()
    _refused(recorder, NAMED_CALLS[call], client, resource, "web", None)


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.kind)
@pytest.mark.parametrize("call", sorted(NAMED_CALLS))
def test_a_legal_name_reaches_its_exact_path(resource: Resource, call: str) -> None:
    client, recorder = _api()
    for name in GOOD_NAMES:
        for namespace in GOOD_NAMESPACES if resource.namespaced else [None]:
            with pytest.raises(_Stop):
                NAMED_CALLS[call](client, resource, name, namespace)
            assert recorder.paths[-1][1] == _expected(resource, name, namespace, call)


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: r.kind)
@pytest.mark.parametrize("call", sorted(SCOPED_CALLS))
def test_a_collection_is_reached_in_a_legal_namespace_and_across_all(resource: Resource, call: str) -> None:
    client, recorder = _api()
    for namespace in [*GOOD_NAMESPACES, None]:
        with pytest.raises(_Stop):
            SCOPED_CALLS[call](client, resource, "web", namespace)
        scope = f"/namespaces/{namespace}" if resource.namespaced and namespace is not None else ""
        assert recorder.paths[-1][1] == f"{resource.prefix}{scope}/{resource.plural}"


@pytest.mark.parametrize("bad", BAD_SEGMENTS, ids=repr)
def test_a_group_or_version_that_is_no_segment_is_refused_by_the_last_fence(bad: str) -> None:
    for group, version in ((bad, "v1"), ("certificates.k8s.io", bad)):
        client, recorder = _api()
        _refused(recorder, client.served_resources, group, version)
    for made in (pod_certificate_requests, cluster_trust_bundles):
        _refused(_Recorder(), made, bad)


def test_illegal_name_is_a_kube_error_so_a_pass_goes_on_past_it() -> None:
    assert issubclass(IllegalName, KubeError)


def test_every_call_of_the_client_is_in_the_table() -> None:
    public = {name for name, _ in inspect.getmembers(KubeApi, inspect.isfunction) if not name.startswith("_")}
    assert public == {*NAMED_CALLS, *SCOPED_CALLS, *FIXED_CALLS, *DATA_CALLS}


def test_every_resource_is_in_the_table() -> None:
    defined = {name for name, value in vars(api).items() if isinstance(value, Resource)}
    assert len(defined) == len(RESOURCES) - 2  # and the two made by functions
    assert len({r.path() for r in RESOURCES}) == len(RESOURCES)


# The name rules themselves (app/kubenames.py), at their limits and one past.

@pytest.mark.parametrize("code", range(0x110))
def test_one_character_is_refused_exactly_when_it_breaks_a_path_or_is_no_printable_ascii(code: int) -> None:
    char = chr(code)
    refused = char in "/%?#\\" or not 0x21 <= code <= 0x7E
    for segment in (f"a{char}b", char * 3):
        assert bool(path_segment_problem(segment)) is refused, repr(segment)
        if char != "/":  # in a whole path, '/' is where a segment ends
            assert bool(path_problem(f"/api/v1/{segment}")) is refused, repr(segment)  # the fast path agrees


@pytest.mark.parametrize(("check", "longest"), [(label_problem, MAX_LABEL), (subdomain_problem, MAX_SUBDOMAIN)])
def test_a_name_rule_holds_at_its_limit_and_one_past(check: Callable[[object], str], longest: int) -> None:
    assert check("a" * longest) == ""
    assert "longer than" in check("a" * (longest + 1))
    for bad in ("", "A", "a_b", "-a", "a-", "a/b", "..", None, 7):
        assert check(bad), repr(bad)
    assert check("0-a") == ""
    assert bool(check("a.b")) is (check is label_problem)
    assert [n for n in ("a..b", ".a", "a.") if not subdomain_problem(n)] == []
