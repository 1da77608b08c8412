"""Raw API calls with one service account's token, as whoever stole it would make them: any method, any
path, any body, and the apiserver's answer as it came (status and text), so a test can tell RBAC's
refusal from an admission policy's."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import kubernetes.client

from tests.cluster.controlplane import ControlPlane


@dataclass(frozen=True)
class Answer:
    status: int
    text: str

    def refused_by(self, policy: str | None) -> bool:
        """403, and by `policy` (its name in the message) or by RBAC when `policy` is None; or, when it is
        "signer", the apiserver's check of `sign` on a certificate request's signer."""
        if policy == "signer":
            # The signer check runs in the request's validation: 422, with a Forbidden cause.
            return self.status == 422 and "is not permitted to" in self.text and "sign" in self.text
        if self.status != 403:
            return False
        return policy in self.text if policy else "cannot" in self.text and "ValidatingAdmissionPolicy" not in self.text


class Token:
    def __init__(self, plane: ControlPlane, namespace: str, account: str) -> None:
        plane.wait_for_service_account(namespace, account)
        core = kubernetes.client.CoreV1Api(_admin(plane))
        self.account = account
        self.username = f"system:serviceaccount:{namespace}:{account}"
        self._token = core.create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        self._url = plane.url
        self._context = ssl.create_default_context(cafile=str(plane.pki.ca.cert))

    def call(self, method: str, path: str, body: Any = None, *, dry_run: bool = False) -> Answer:
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        query = "?dryRun=All" if dry_run else ""
        request = urllib.request.Request(
            self._url + path + query, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": content, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=30) as answer:
                return Answer(answer.status, answer.read().decode())
        except urllib.error.HTTPError as e:
            return Answer(e.code, e.read().decode())


def _admin(plane: ControlPlane) -> kubernetes.client.ApiClient:
    from tests.cluster.controlplane import api_client

    return api_client(plane.admin_kubeconfig)


def stored(plane: ControlPlane, path: str) -> dict[str, Any]:
    """The object at `path` as the admin reads it (a body to send back in an update)."""
    done = plane.kubectl("get", "--raw", path)
    found: dict[str, Any] = json.loads(done.stdout)
    return found
