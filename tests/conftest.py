"""Fixtures shared by every test package."""

from tests.kubeapi.fixtures import kube_client, kubeapi

__all__ = ["kube_client", "kubeapi"]
