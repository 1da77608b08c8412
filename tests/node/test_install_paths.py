"""tls-injector installed on a real node by each way docs/install.md gives a user, then checked as a user
checks it. Three paths, each on a node of its own (one install per cluster: tests/node/install_paths.py):

- `overlay`: "Make your overlay" and "Apply" run as written: the example overlay copied to
  my-cluster, its image set to REGISTRY/tls-injector@DIGEST by the documented sed, check-offline.sh,
  the server-side dry runs, the overlay, its bootstrap Job, the rollouts and `tls-injector doctor`;
- `chart`: "Install with Helm" run as written with the chart's example values (`-f`, the one change,
  as the doc tells a user to start from them): the namespace, then `helm upgrade --install --wait`;
- `registry`: docs/release.md's release run as written against a registry of the suite's own running
  inside the node's network namespace (tests/shipping/release_flow.py), then docs/install.md's verify
  step and its install from the registry as written: `helm upgrade --install` of
  `oci://$REGISTRY/charts/tls-injector` by version, the image pulled by containerd by the digest the
  release pinned (nothing imported).

The overlay and chart paths use the image tools/image.py builds from the Dockerfile, imported into
containerd and also named `<repository>@<digest>` (`ctr images tag`), as a pull by digest names it:
REGISTRY is the name it is imported under, `docker.io/library`, and DIGEST its manifest digest, so the
pods name it by digest as a user's overlay and values do, and the kubelet finds it without a pull (no
registry is reachable there).

On each: the bootstrap Job completed, every webhook replica is Ready and is what the `tls-injector`
Service routes to (and an admission call through it answers), the reconciler holds the Lease, the pods
carry the probes the manifests declare and the kubelet's own counts show those probes passing, and
`tls-injector doctor` from the test process (outside the node, a kubeconfig, a port-forward for the
served-certificate check) exits 0 with no failed check.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.node.harness import Node, own_node
from tests.node.images import archive_name_and_digest
from tests.node.install import IMAGE_BUILD_SECONDS, NS, product_image
from tests.node.install_paths import (
    Installation,
    documented,
    free_port,
    job,
    lease,
    manifests,
    port_forward,
    probe_results,
    service_endpoints,
)
from tests.node.namespace import Forwarder
from tests.shipping.helm import EXAMPLE_VALUES
from tests.shipping.registry import Registry, running
from tests.shipping.release_flow import Released, release_to
from tests.shipping.support import release_tree
from tools import release

# Each path starts a node (about a minute), installs (about a minute), and stops it (about 20 s); the
# registry path also runs the release (1-2 min). The first test of a path pays for all of it.
pytestmark = pytest.mark.timeout(IMAGE_BUILD_SECONDS + 1200)
PATHS = ("overlay", "chart", "registry")
# What the imported image is named under by `ctr images import` (tools/image.py names it so).
IMPORTED_REGISTRY = "docker.io/library"
# The two addresses of "Network policies", found on this node as that section says: the apiserver's
# calls come from the node's address, and the `kubernetes` EndpointSlice names the same address.
NODE_CIDR = "10.200.0.1/32"


# ---- the three installs -----------------------------------------------------------------------------------

def _install_overlay(node: Node, tmp: Path) -> Installation:
    archive = product_image()
    node.import_image(archive, by_digest=True)
    installation = Installation("overlay", node, release_tree(tmp / "tree"),
                                env={"REGISTRY": IMPORTED_REGISTRY, "DIGEST": archive_name_and_digest(archive)[1]})
    installation.run_block(documented("offline", "cp -r manifests/overlays/example"))
    apply = documented("cluster", "# 0. The namespace first")
    assert apply.text.rstrip().endswith("tls-injector doctor"), "the Apply block ends by asking doctor"
    installation.run_block(apply)
    for folder in ("manifests/overlays/my-cluster", "manifests/overlays/my-cluster/bootstrap"):
        installation.rendered += manifests(installation.sh(f"kubectl kustomize {folder}").stdout)
    return installation


def _values(tmp: Path) -> Path:
    """The chart's example values with the two addresses set, as docs/install.md tells a user to start."""
    values = yaml.safe_load(EXAMPLE_VALUES.read_text())
    values["networkPolicy"].update(controlPlaneCIDR=NODE_CIDR, apiServerCIDR=NODE_CIDR)
    path = tmp / "my-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _install_chart(node: Node, tmp: Path) -> Installation:
    archive = product_image()
    node.import_image(archive, by_digest=True)
    values = _values(tmp)
    installation = Installation("chart", node, release_tree(tmp / "tree"),
                                env={"REGISTRY": IMPORTED_REGISTRY, "DIGEST": archive_name_and_digest(archive)[1],
                                     "HELM_CACHE_HOME": str(tmp / "helm-cache"),
                                     "HELM_CONFIG_HOME": str(tmp / "helm-config"),
                                     "HELM_DATA_HOME": str(tmp / "helm-data")})
    block = documented("cluster", "# 0. The namespace and its labels first")
    sets = '--set image.digest="$DIGEST"'
    assert block.text.count(sets) == 1, block.text
    installation.run_block(block, block.text.replace(sets, f'{sets} -f "$VALUES"'), VALUES=str(values))
    installation.rendered = manifests(installation.sh(
        f'helm template tls-injector charts/tls-injector --namespace {NS} -f "$VALUES" '
        '--set image.repository="$REGISTRY/tls-injector" --set image.digest="$DIGEST"', VALUES=str(values)).stdout)
    return installation


def _install_from_registry(node: Node, released: Released) -> Installation:
    installation = Installation("registry", node, released.root, env={**released.env, "REGISTRY": released.prefix,
                                                                      "DIGEST": released.digest},
                                tools=released.tools, registry_log=released.registry.log)
    images = node.ctr("images", "ls", "-q").stdout
    assert "tls-injector" not in images.replace("tls-injector.test/", ""), f"imported before the install:\n{images}"
    verify = documented("registry", "cosign verify")
    installation.run_block(verify)
    install = documented("cluster", "# From the release's registry")
    assert f"--version {release.version()}" in install.text
    installation.run_block(install)
    installation.rendered = manifests(installation.sh(
        f'helm template tls-injector "oci://$REGISTRY/charts/tls-injector" --version {release.version()} '
        f"--namespace {NS}").stdout)
    return installation


@contextlib.contextmanager
def _registry_in_node(node: Node, tmp: Path) -> Iterator[Registry]:
    """The release's registry inside the node's network namespace, at 127.0.0.1:PORT both there (where
    containerd pulls) and on the host's loopback (a relay: where the release's clients push and helm
    pulls), and containerd told to trust its CA (hosts.toml). Nothing on the host's network changes."""
    port = free_port()
    forwarder = Forwarder(node.namespace, port).start()
    try:
        with running(tmp / "registry", port=port, wrap=node.namespace.prefix()) as registry:
            node.trust_registry(registry.host, registry.ca)
            yield registry
    finally:
        forwarder.stop()


@pytest.fixture(scope="module", params=PATHS)
def installed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    path = str(request.param)
    tmp = tmp_path_factory.mktemp(path)
    with own_node(tmp / "node") as node:
        if path == "overlay":
            yield _install_overlay(node, tmp)
        elif path == "chart":
            yield _install_chart(node, tmp)
        else:
            with _registry_in_node(node, tmp) as registry:
                released = release_to(registry, tree=tmp / "release", home=tmp / "home", archive=product_image())
                yield _install_from_registry(node, released)


# ---- what a user checks -----------------------------------------------------------------------------------

def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def test_the_bootstrap_job_completed(installed: Installation) -> None:
    found = job(installed, "tls-injector-bootstrap")
    conditions = {c["type"]: c["status"] for c in found.get("status", {}).get("conditions", [])}
    assert conditions.get("Complete") == "True", (found.get("status"), installed.state())
    assert found["status"].get("succeeded") == 1


def test_every_webhook_replica_is_ready_behind_the_service_and_answers_through_it(installed: Installation) -> None:
    wanted = installed.declared("Deployment", "tls-injector")["spec"]["replicas"]
    # The example overlay and values ask for three; the released chart installed as the doc writes it,
    # with no values, for the chart's default of two.
    assert wanted == (2 if installed.path == "registry" else 3)
    assert installed.deployment("tls-injector")["spec"]["replicas"] == wanted
    pods = [p for p in installed.pods("webhook") if not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == wanted, installed.state()
    assert all(_ready(p) for p in pods), installed.state()
    assert service_endpoints(installed, "tls-injector") == {p["status"]["podIP"]: True for p in pods}
    # The apiserver calls the webhook at that Service (kube-proxy): a dry-run Pod comes back injected.
    installed.node.kubectl("create", "namespace", "demo")
    installed.node.kubectl("label", "namespace", "demo", "tls-injector.io/inject=enabled")
    installed.node.cp.wait_for_service_account("demo", "default")
    preview = json.loads(installed.node.kubectl("-n", "demo", "run", "probe", "--image=busybox",
                                                "--dry-run=server", "-o", "json").stdout)
    assert preview["metadata"].get("annotations", {}).get("tls-injector.io/injected"), preview["metadata"]
    volumes = {v["name"]: v for v in preview["spec"]["volumes"]}
    assert volumes["tls-injector-cert"]["secret"]["secretName"] == "probe-tls", volumes
    assert volumes["tls-injector-trust"]["configMap"]["name"] == "tls-injector-trust-bundle", volumes


def test_the_reconciler_holds_the_leader_lease(installed: Installation) -> None:
    spec = lease(installed)["spec"]
    reconcilers = {p["metadata"]["name"] for p in installed.pods("reconciler") if _ready(p)}
    assert len(reconcilers) == 2, installed.state()
    holder = spec.get("holderIdentity") or ""
    assert holder.rsplit("_", 1)[0] in reconcilers, (holder, reconcilers)  # identity: "<pod name>_<pid>"
    assert spec["leaseDurationSeconds"] == 15
    renewed = datetime.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
    age = (datetime.datetime.now(datetime.UTC) - renewed).total_seconds()
    assert age < spec["leaseDurationSeconds"], f"the Lease was last renewed {age:.0f} s ago"


PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
KUBELET_PROBE_TYPE = {"livenessProbe": "Liveness", "readinessProbe": "Readiness", "startupProbe": "Startup"}


def _declared_probes(installation: Installation, deployment: str) -> dict[str, dict[str, Any]]:
    (container,) = installation.declared("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return {kind: container[kind] for kind in PROBES if kind in container}


def _subset(declared: Any, running: Any) -> bool:
    """Every field the manifest sets is what the running pod has (the API adds defaults beside them)."""
    if isinstance(declared, dict):
        return isinstance(running, dict) and all(_subset(v, running.get(k)) for k, v in declared.items())
    return bool(declared == running)


@pytest.mark.parametrize(("deployment", "component"), [("tls-injector", "webhook"),
                                                       ("tls-injector-reconciler", "reconciler")])
def test_the_pods_pass_the_probes_the_manifests_declare(installed: Installation, deployment: str,
                                                        component: str) -> None:
    declared = _declared_probes(installed, deployment)
    assert {"livenessProbe", "readinessProbe"} <= set(declared), declared
    pods = [p for p in installed.pods(component) if not p["metadata"].get("deletionTimestamp")]
    assert pods
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert {k for k in PROBES if k in container} == set(declared), pod["metadata"]["name"]
        for kind, probe in declared.items():
            assert _subset(probe, container[kind]), (kind, probe, container[kind])
        (status,) = pod["status"]["containerStatuses"]
        assert (status["ready"], status["started"], status["restartCount"]) == (True, True, 0), status
    # The kubelet ran them: its own counts of each declared probe of each container, passed at least once
    # (readiness is what made the container Ready, liveness what kept it from a restart). A liveness probe
    # runs every periodSeconds, so its first count can lag the pod's Ready by that long.
    deadline = time.monotonic() + max(p.get("periodSeconds", 10) for p in declared.values()) + 15
    while True:
        results = probe_results(installed)
        missing = [(pod["metadata"]["name"], KUBELET_PROBE_TYPE[kind]) for pod in pods for kind in declared
                   if results.get((pod["metadata"]["name"], pod["spec"]["containers"][0]["name"],
                                   KUBELET_PROBE_TYPE[kind]), {}).get("successful", 0) < 1]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(2)
    counted = json.dumps({" ".join(k): v for k, v in results.items()})
    assert not missing, f"probes the kubelet has not seen pass: {missing}\n{counted}"


def test_doctor_from_outside_the_node_says_healthy(installed: Installation) -> None:
    """docs/install.md's "Is it healthy?": doctor with a port-forward to the webhook Service, from the
    test process with the kubeconfig, exits 0 with no failed check, the served certificate's included."""
    with port_forward(installed, "svc/tls-injector", 443) as port:
        done = installed.sh(f"tls-injector doctor --webhook-address 127.0.0.1:{port} -o json")
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    report = json.loads(done.stdout)
    assert report["ok"] is True, done.stdout[-4000:]
    assert report["summary"]["error"] == 0, done.stdout[-4000:]
    statuses = {c["title"]: c["status"] for c in report["checks"]}
    # Without --webhook-address this one is only a warning ("resolves only inside the cluster").
    assert statuses["every caBundle trusts the certificate the webhook serves"] == "ok", statuses
    assert statuses["a reconciler holds the leader Lease"] == "ok", statuses


def test_the_pods_run_the_image_by_the_digest_the_install_named(installed: Installation) -> None:
    """The pods name the image as REGISTRY/tls-injector@DIGEST and the runtime ran exactly those bytes.
    From the registry: it was not on the node before the install (_install_from_registry checked),
    containerd pulled it and the registry's log shows the manifest asked for by digest."""
    reference = f"{installed.env['REGISTRY']}/tls-injector@{installed.env['DIGEST']}"
    for component in ("webhook", "reconciler"):
        pods = installed.pods(component)
        assert pods
        for pod in pods:
            assert pod["spec"]["containers"][0]["image"] == reference
            (status,) = pod["status"]["containerStatuses"]
            assert status["imageID"] == reference, status
    assert reference in installed.node.ctr("images", "ls", "-q").stdout.split()
    if installed.path == "registry":
        assert installed.registry_log is not None
        served = [line for line in installed.registry_log.read_text(errors="replace").splitlines()
                  if f"/manifests/{installed.env['DIGEST']}" in line and "containerd" in line]
        assert served, "the registry's log shows no manifest request by digest from containerd"
