"""Fixtures shared by every test package."""

from tests.kubeapi.fixtures import core, kube_client, kubeapi

__all__ = ["core", "kube_client", "kubeapi"]
