"""The doctor on your own CAs (`--ca-secret`, `--client-ca-secret`): one line each, saying why the
reconciler would stop its passes (the same checks it makes), or that the CA is usable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doctor.cluster import Cluster, block, healthy_cluster, line, run
from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, data
from tests.reconcile.test_user_ca import put_user_ca
from tls_injector.pki import issue_leaf, load_cert_key, make_ca

CLIENT_TITLE = "your own client CA (--client-ca-secret) is usable"
SERVING_TITLE = "your own serving CA (--ca-secret) is usable"


@pytest.fixture
def cluster(kubeapi: Emulator, tmp_path: Path) -> Iterator[Cluster]:
    with healthy_cluster(kubeapi, tmp_path) as built:
        yield built


def test_two_usable_cas_of_their_own_each_pass(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    put_user_ca(cluster.emu, make_ca(common_name="org serving CA", now=cluster.now), "my-ca")
    put_user_ca(cluster.emu, make_ca(common_name="org client CA", now=cluster.now), "my-client-ca")
    _, out = run(cluster.doctor("--ca-secret", "my-ca", "--client-ca-secret", "my-client-ca"), capsys)
    assert line(out, SERVING_TITLE).startswith("✔")
    assert "CN=org serving CA, expires " in line(out, SERVING_TITLE)
    assert line(out, CLIENT_TITLE).startswith("✔")
    assert "CN=org client CA, expires " in line(out, CLIENT_TITLE)


def test_without_the_flags_there_is_no_such_line(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(cluster.doctor(), capsys)
    assert "your own" not in out


@pytest.mark.parametrize("case", ["not a CA", "key mismatch", "the user's serving CA's key",
                                  "the generated serving CA's key", "missing"])
def test_an_unusable_client_ca_fails_its_line_with_the_reason_the_reconciler_stops_for(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], case: str,
) -> None:
    emu, now = cluster.emu, cluster.now
    ca = make_ca(common_name="org client CA", now=now)
    extra: tuple[str, ...] = ()
    if case == "not a CA":
        put_user_ca(emu, issue_leaf(issuer=ca, dns_names=["x.example"], now=now), "my-client-ca")
        words = "the certificate is not a CA"
    elif case == "key mismatch":
        put_user_ca(emu, ca, "my-client-ca", key_pem=make_ca(common_name="other", now=now).key_pem)
        words = "the private key does not belong to the CA certificate"
    elif case == "the user's serving CA's key":
        put_user_ca(emu, ca, "my-ca")
        put_user_ca(emu, ca, "my-client-ca")
        extra = ("--ca-secret", "my-ca")
        words = "its key is also the serving CA's"
    elif case == "the generated serving CA's key":
        stored = data(emu.get("secrets", "tls-injector-ca", OWN_NS))
        (fp,) = {k.split(".")[0] for k in stored if k.endswith(".crt")}
        put_user_ca(emu, load_cert_key(stored[f"{fp}.crt"], stored[f"{fp}.key"]), "my-client-ca")
        words = "its key is also the serving CA's"
    else:
        words = f"Secret {OWN_NS}/my-client-ca does not exist"
    code, out = run(cluster.doctor("--client-ca-secret", "my-client-ca", *extra), capsys)
    assert code == 1, out
    assert line(out, CLIENT_TITLE).startswith("✖"), out
    found = block(out, CLIENT_TITLE)
    assert words in found, found
    assert "hint: the reconciler stops every pass until it is fixed" in found
    if extra:  # one key in both Secrets: each line says so of its own
        assert "its key is also the client CA's" in block(out, SERVING_TITLE)
