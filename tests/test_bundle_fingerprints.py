"""The CA fingerprints /mutate records come from the mounted trust bundle, re-read when it changes."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import jsonpatch
import pytest

from tests.support.certs import swap_secret_volume, write_serving_pair
from tests.support.reviews import fixture
from tests.support.server import running_server
from tls_injector.cli import build_handlers
from tls_injector.names import INJECTED_ANNOTATION
from tls_injector.pki import fingerprint
from tls_injector.settings import ServeSettings
from tls_injector.web.fingerprints import BundleFingerprints


def recorded_cas(client_post: object, review: dict[str, object]) -> list[str]:
    response = client_post("/mutate", json=review).json()["response"]  # type: ignore[operator]
    ops = json.loads(base64.b64decode(response["patch"]))
    pod = jsonpatch.apply_patch(review["request"]["object"], ops)  # type: ignore[index]
    cas: list[str] = json.loads(pod["metadata"]["annotations"][INJECTED_ANNOTATION])["cas"]
    return cas


def test_injected_pods_record_the_fingerprints_of_the_bundle_in_use_now(tmp_path: Path) -> None:
    old = write_serving_pair(tmp_path / "old", common_name="old CA")
    new = write_serving_pair(tmp_path / "new", common_name="new CA")
    (tmp_path / "both").mkdir()
    (tmp_path / "both" / "ca.crt").write_bytes(old.ca.cert_pem + new.ca.cert_pem)
    volume = tmp_path / "trust"
    swap_secret_volume(volume, tmp_path / "old")  # a ConfigMap volume updates the same way
    bundle = BundleFingerprints(volume / "ca.crt")
    mutate, validate = build_handlers(ServeSettings(), ca_fingerprints=bundle)
    review = fixture("synthetic/pod-create-from-replicaset.json")
    with running_server(tmp_path, mutate=mutate, validate=validate) as server, server.client() as client:
        assert recorded_cas(client.post, review) == [fingerprint(old.ca.cert)]
        swap_secret_volume(volume, tmp_path / "both")
        assert bundle.poll() is True
        assert recorded_cas(client.post, review) == sorted([fingerprint(old.ca.cert), fingerprint(new.ca.cert)])


def test_a_missing_or_unreadable_bundle_means_no_fingerprints_not_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "ca-bundle.crt"
    bundle = BundleFingerprints(path)
    assert bundle() == ()
    path.write_bytes(b"not a certificate")
    bundle.poll()
    assert bundle() == ()
    assert bundle.poll() is False  # unchanged content is not read again


def test_a_bundle_without_any_ca_is_a_warning_naming_the_file(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "no-such-bundle.crt"
    with caplog.at_level(logging.INFO, logger="tls_injector.bundle"):
        BundleFingerprints(path)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "no CA certificate" in record.getMessage()
    assert record.__dict__["path"] == str(path)
