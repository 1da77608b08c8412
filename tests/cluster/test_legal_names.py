"""The table of legal and first-illegal names of every kind that runs pods (tests/reconcile/legal_names.py),
which the emulator's validation and the reconciler's chain tests are built on, held to the real apiserver:
every legal name is accepted and every first name past a rule refused (422), by server-side dry-run
creates (nothing is stored)."""

from __future__ import annotations

import kubernetes.client
import pytest

from tests.reconcile.legal_names import illegal_names, legal_names
from tests.reconcile.test_legal_names import KINDS, _dry_run_create, _manifest


@pytest.mark.parametrize("kind", KINDS)
def test_the_real_apiserver_agrees_with_the_table_of_names(admin: kubernetes.client.ApiClient, kind: str) -> None:
    accepted = {name: _dry_run_create(admin, _manifest(kind, name)) for name in legal_names(kind)}
    refused = {name: _dry_run_create(admin, _manifest(kind, name)) for name in illegal_names(kind)}
    assert {n: code for n, code in accepted.items() if code != 201} == {}
    assert {n: code for n, code in refused.items() if code != 422} == {}
