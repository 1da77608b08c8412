"""Shared certificates for the PKI tests: P-256 everywhere (0.02 ms a key) unless a test is about keys."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tls_injector.pki import CertKey, make_ca

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def ca() -> CertKey:
    return make_ca(common_name="test root", now=NOW)


@pytest.fixture(scope="session")
def other_ca() -> CertKey:
    return make_ca(common_name="test root", now=NOW)  # same name, other key: only the signature differs
