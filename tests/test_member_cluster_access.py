"""How the hub reaches a member cluster (docs/multicluster.md): the kubeconfig a member Secret holds may
only name an https:// server (plain HTTP to this machine's loopback aside), since the hub sends an
intermediate CA's private key over that connection; and whatever the member's API server puts in its Date
header, comparing clocks never raises."""

from __future__ import annotations

import base64
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3
import yaml

from tls_injector.kube import ClusterConfig, KubeApi, KubeError, api_client, member_client
from tls_injector.reconcile.federation.issuance import clock_skew_problem

# A CA certificate in PEM, for kubeconfigs naming an https:// server (its content is not checked here).
CA_DATA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def kubeconfig(server: str, ca_data: str | None = CA_DATA) -> bytes:
    cluster = {"server": server, **({"certificate-authority-data": ca_data} if ca_data is not None else {})}
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "member",
        "clusters": [{"name": "member", "cluster": cluster}],
        "users": [{"name": "hub", "user": {"token": "t"}}],
        "contexts": [{"name": "member", "context": {"cluster": "member", "user": "hub"}}],
    }).encode()


@pytest.mark.parametrize("server", [
    "HTTP://10.0.0.9:80",  # the scheme in capitals: urllib3 reads it as http
    "http://localhost.attacker.example:80",  # starts like a loopback name, resolves anywhere
    "http://127.0.0.1.nip.io",
    "10.0.0.9:80",  # no scheme: urllib3 defaults to http
    "member.example.org:6443",
    "ftp://member.example.org",
    "https://",  # no host
    "",
])
def test_a_member_server_that_is_not_https_is_refused(server: str) -> None:
    with pytest.raises(KubeError, match="is not an https:// URL"):
        member_client(kubeconfig(server))


# Each read as one host by urllib.parse (the loopback check's parser before) and another by urllib3 (the
# client that connects): the check passed them while the hub sent its token, in clear, to the other host.
PARSER_SPLITS = [
    "http://10.0.0.9\\@127.0.0.1/",  # urllib3: 10.0.0.9; urllib.parse: 127.0.0.1
    "http://10.0.0.9\\@127.0.0.1:8001",
    "https://10.0.0.9\\@127.0.0.1/",
    "http://127.0.0.1:80\\@10.0.0.9/",  # the other way round
    "http://user@127.0.0.1/",  # user info: no server URL has any
    "http://127.0.0.1#@10.0.0.9/",
    "http://127.0.0.1?@10.0.0.9/",
    "http://127.0.0.1 @10.0.0.9/",
    "http://127.0.0.1\t/",
    "https://127.0.0.1%2f.example.org/",  # percent-encoding read two ways (case)
]


@pytest.mark.parametrize("server", PARSER_SPLITS)
def test_a_server_the_two_url_parsers_read_differently_is_refused(server: str) -> None:
    with pytest.raises(KubeError, match=r"may not|two different addresses"):
        member_client(kubeconfig(server))


def test_the_first_of_those_servers_really_is_read_as_two_hosts() -> None:
    """What made the check pass: the test above guards a real difference, not a string."""
    assert urllib3.util.parse_url(PARSER_SPLITS[0]).host == "10.0.0.9"
    assert urllib.parse.urlsplit(PARSER_SPLITS[0]).hostname == "127.0.0.1"


@pytest.mark.parametrize("server", ["https://member.example.org:6443", "HTTPS://10.0.0.9", "http://127.0.0.1:8001",
                                    "http://localhost:8001", "http://[::1]:8001",
                                    "https://rancher.example.org/k8s/clusters/c-m-1", "https://[fd00::1]:6443"])
def test_https_and_plain_http_to_loopback_are_accepted(server: str) -> None:
    configured = member_client(kubeconfig(server))
    try:
        assert configured.configuration.host == server
    finally:
        configured.close()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(("ca_data", "reason"), [
    (None, "has no certificate-authority-data"),
    ("", "has no certificate-authority-data"),
    ("not base64!", "is not base64"),
    (base64.b64encode(b"just some bytes").decode(), "has no certificate-authority-data"),
])
def test_an_https_member_server_without_its_ca_is_refused(ca_data: str | None, reason: str) -> None:
    """No fallback to the public CAs of the hub's image: a certificate for the member's address from any
    of them would otherwise receive the intermediate keys."""
    with pytest.raises(KubeError, match=reason):
        member_client(kubeconfig("https://member.example.org:6443", ca_data))


def test_plain_http_to_loopback_needs_no_ca() -> None:
    member_client(kubeconfig("http://127.0.0.1:8001", None)).close()  # type: ignore[no-untyped-call]


class _Dated(BaseHTTPRequestHandler):
    """Answers GET /version with the Date header the test sets."""

    date = ""

    def do_GET(self) -> None:
        body = b'{"major": "1", "minor": "31"}'
        self.send_response_only(200)
        self.send_header("Date", self.date)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dated_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dated)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("header", ["Mon, 02 Jan 2034 03:04:05 GMT", "Mon, 02 Jan 2034 03:04:05 -0000",
                                    "Mon, 02 Jan 2034 03:04:05 +0000"])
def test_a_member_date_in_any_of_its_utc_spellings_is_compared_with_the_hub_clock(
        dated_server: ThreadingHTTPServer, header: str) -> None:
    # "-0000" (RFC 5322's "UTC, local time unknown") parsed to a naive time, and the hub's comparison with
    # its aware clock raised TypeError: the whole pass crashed, every other member and the pod-certificate
    # requests after it left unserved.
    _Dated.date = header
    api = KubeApi(api_client(ClusterConfig(server=f"http://127.0.0.1:{dated_server.server_address[1]}")))
    try:
        date = api.server_date()
    finally:
        api.api_client.close()  # type: ignore[no-untyped-call]
    assert date == datetime(2034, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert clock_skew_problem("m", date, date + timedelta(seconds=10)) == ""
    assert "ahead of the hub" in clock_skew_problem("m", date, date - timedelta(hours=1))


def test_a_surprise_on_one_member_is_that_members_problem_not_the_passs() -> None:
    """Whatever a member's data makes the hub's code raise is reported for that member, and the pass goes
    on to the others (the Date header written with -0000 once raised TypeError out of the whole pass)."""
    from tls_injector.reconcile.federation.hub import MemberOutcome, _visit
    from tls_injector.reconcile.federation.registry import Member

    def work(api: KubeApi) -> str:
        raise TypeError("can't compare offset-naive and offset-aware datetimes")

    member = Member("west", {}, kubeconfig("http://127.0.0.1:9"))
    outcome = _visit(member, MemberOutcome("west"), work)
    assert outcome.problem == ("member west: internal error (TypeError): "
                               "can't compare offset-naive and offset-aware datetimes")
