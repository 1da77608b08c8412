"""What an informer cache of pods can ask the real apiserver for (issue 42): the reconciler reads a pod's
metadata only (its labels, annotations, owners), so a list and a watch of pods as PartialObjectMetadata
carry all it needs and none of the spec or status. Shown here on kube-apiserver 1.37: the list answers a
PartialObjectMetadataList with its resourceVersion, a watch from that version streams PartialObjectMetadata
events, bookmarks included (allowWatchBookmarks). Workloads cannot be read so: what discovery reads of
them (the pod template's labels and annotations) is in their spec."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

from tests.cluster.controlplane import ControlPlane

LIST_AS_METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
WATCH_AS_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
NS = "default"  # the control plane waits for its service account, which a pod needs


def _call(cluster: ControlPlane, path: str, *, accept: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(cluster.url + path, method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Accept": accept, "Content-Type": "application/json"})
    return urllib.request.urlopen(request, context=cluster._ssl_context(), timeout=30)


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"tls-injector.io/inject": "true"},
                         "annotations": {"tls-injector.io/secret-name": "s"}},
            "spec": {"containers": [{"name": "c", "image": "example/app:1"}]}}


def test_pods_are_listed_and_watched_as_their_metadata_with_bookmarks(cluster: ControlPlane) -> None:
    _call(cluster, f"/api/v1/namespaces/{NS}/pods", accept="application/json", body=_pod("meta0")).read()
    with _call(cluster, f"/api/v1/namespaces/{NS}/pods", accept=LIST_AS_METADATA) as answer:
        listed = json.loads(answer.read())
    assert (listed["kind"], listed["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    item = next(i for i in listed["items"] if i["metadata"]["name"] == "meta0")
    assert sorted(item) == ["apiVersion", "kind", "metadata"]
    # With the webhook installed (other tests of the session), the pod carries its injection record too.
    assert item["metadata"]["labels"]["tls-injector.io/inject"] == "true"
    events: list[dict[str, Any]] = []
    # A watch's last bookmark comes about 2 s before its end (test_watches.py): 6 s gives one.
    path = (f"/api/v1/namespaces/{NS}/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=6"
            f"&resourceVersion={listed['metadata']['resourceVersion']}")

    def watch() -> None:
        with _call(cluster, path, accept=WATCH_AS_METADATA) as stream:
            events.extend(json.loads(line) for line in stream)

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(1)
    _call(cluster, f"/api/v1/namespaces/{NS}/pods", accept="application/json", body=_pod("meta1")).read()
    watcher.join(20)
    added = [e["object"] for e in events if e["type"] == "ADDED"]
    assert [o["metadata"]["name"] for o in added] == ["meta1"]
    assert sorted(added[0]) == ["apiVersion", "kind", "metadata"]
    assert added[0]["kind"] == "PartialObjectMetadata"
    assert added[0]["metadata"]["annotations"]["tls-injector.io/secret-name"] == "s"
    bookmarks = [e["object"] for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks
    assert all(b["metadata"]["resourceVersion"] for b in bookmarks)
