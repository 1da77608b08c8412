"""The injection plan: from a pod (its metadata as decoded, its spec typed as the plan reads it: see
tls_injector.injection.podspec) to what must be added to it.

The plan lists only what is missing, so planning an already injected pod gives an empty plan: that is
what makes reinvocation (`reinvocationPolicy: IfNeeded`) and apiserver retries no-ops. It also records
which lists and maps exist, so the patch can create a missing one instead of adding under it.

Clashes, decided here:
- A user's volume already named `tls-injector-cert` (or `-trust`) with other contents: our volume takes
  the next free name (`tls-injector-cert-2`, ...). Volume names are private to the pod and only our own
  mounts refer to ours, so the rename is invisible and safe; ours are recognised by contents, not name.
- A container already mounting something else at our mount path: refused. Moving our mount elsewhere
  would put the certificate where the application does not look, and the user's mount there says the
  path is taken on purpose; the message names the annotations that resolve it. Only exact paths clash,
  as in the apiserver's own check: a user mount of a parent directory (say /etc) is allowed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import orjson

from tls_injector import names
from tls_injector.injection.choices import Choices, InjectionOptions, InjectionRefused, read_choices, shown
from tls_injector.injection.jvm import keystore_warnings
from tls_injector.injection.podspec import NO_ENV, Container, PodSpec, Source, Volume, VolumeMount, pod_spec
from tls_injector.injection.workload import Workload, pod_secret_name

# Init containers first: that is the order the kubelet starts them in, and the order the record lists.
ContainerField = Literal["initContainers", "containers"]
MetadataState = Literal["missing", "no-annotations", "present"]
RECORD_VERSION = 1
# The most containers (init, regular and sidecars together) a pod may have for tls-injector to inject it.
# Real pods have a handful; meshes and log shippers add a few sidecars. Each injected container adds two
# mounts (~200 bytes of patch), so 256 keeps a patch near 50 KB and the plan well under a millisecond,
# where 200,000 containers (a body still under the size cap) cost 3 s and a 65 MB patch. Past it the pod
# is refused with the reason rather than started silently without its certificate.
MAX_CONTAINERS = 256
# Container names are DNS labels; the apiserver refuses longer ones after admission anyway.
MAX_CONTAINER_NAME = 63


# The plan's records are NamedTuples: immutable like a frozen dataclass, but built with one tuple
# allocation, where a frozen dataclass sets each field through object.__setattr__ (about 1 us more per
# record measured here, and a new template's plan builds one per container). This module builds them with
# `_new(Record, (fields...))`, which is what the NamedTuple's own generated __new__ does after a Python
# call of its own: 115 against 255 ns a record (six records a plan stream's review).
_new = tuple.__new__


class ContainerChange(NamedTuple):
    field: ContainerField
    position: int  # in spec.<field> (`index` is a tuple's method)
    mounts: tuple[dict[str, Any], ...]
    mounts_exist: bool
    env: tuple[dict[str, Any], ...]
    env_exist: bool


class AnnotationChange(NamedTuple):
    key: str
    value: str
    present: bool  # the key exists with another value, so it is replaced rather than added


class Plan(NamedTuple):
    secret_name: str
    record: str  # the value of the `injected` annotation
    volumes: tuple[dict[str, Any], ...]
    volumes_exist: bool
    containers: tuple[ContainerChange, ...]
    annotations: tuple[AnnotationChange, ...]
    metadata: MetadataState
    warnings: tuple[str, ...]

    @property
    def changes_nothing(self) -> bool:
        return not (self.volumes or self.containers or self.annotations)


def plan_injection(
    metadata: object,
    spec: PodSpec | None,
    *,
    options: InjectionOptions,
    ca_fingerprints: Iterable[str] = (),
    workload: Workload | None = None,
    pins: Mapping[str, str] | None = None,
) -> Plan:
    """Plan the injection into the pod with this `metadata` (as decoded: None when the pod has none) and
    `spec` (typed, see tls_injector.injection.podspec); raise InjectionRefused when it cannot be done safely.

    `workload` replaces the one derived from the pod (an offline template has no owner yet); `pins` are
    annotations to add where the pod does not set them (a CronJob template's, see workload.cronjob_pins).
    """
    if metadata is not None and not isinstance(metadata, dict):
        raise InjectionRefused("metadata must be a map")
    meta: Mapping[str, Any] = metadata or {}
    annotations = _map(meta, "annotations", "metadata.annotations")
    if spec is None:
        raise InjectionRefused("the pod has no spec")
    _check_size(spec)
    choices = read_choices(pod_secret_name(meta) if workload is None else workload.secret_name, annotations, options)
    taken = {volume.name: volume for volume in spec.volumes or ()}
    new_volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    paths: dict[str, dict[str, Any]] = {}  # our mounts by path, for `_missing_mounts`
    for base, source, identity, path in _our_volumes(choices, options):
        name, new = _volume(taken, base, source, identity)
        if new is not None:
            new_volumes.append(new)
        mounts.append(mount := {"name": name, "mountPath": path, "readOnly": True})
        paths[path] = mount
    bundle_file = names.PUBLIC_BUNDLE_KEY if choices.public_roots else names.BUNDLE_KEY
    env = tuple({"name": var, "value": f"{choices.trust_path}/{bundle_file}"} for var in choices.env) \
        if choices.env else ()
    targets = _targets(spec, choices.containers)
    warnings: list[str] = [choices.fallback] if choices.fallback else []
    if choices.mode == names.MODE_POD_CERTIFICATE and annotations.get(names.TRUSTSTORE_ANNOTATION):
        # ClusterTrustBundle projections are PEM only, and the kubelet's key never leaves the node.
        warnings.append(f"{names.TRUSTSTORE_ANNOTATION}: no PKCS#12 truststore with pod certificates; "
                        f"read the PEM bundle instead")
    if choices.mode == names.MODE_POD_CERTIFICATE and annotations.get(names.PUBLIC_ROOTS):
        # The ClusterTrustBundle holds our CAs only; the public roots live in the namespace's ConfigMap.
        warnings.append(f"{names.PUBLIC_ROOTS}: no public roots with pod certificates; the TLS variables, if "
                        f"asked for, name our CAs alone")
    if choices.key_mode is not None and choices.mode == names.MODE_POD_CERTIFICATE:
        # Measured on the kubelet (docs/injection.md, "Two modes"): it writes a pod certificate's files as it
        # writes a service-account token, to the pod's one user (0600) or with its fsGroup (0640), whatever
        # the volume's defaultMode says; the key mode is the files' mode only when it knows neither.
        warnings.append(f"{names.KEY_MODE_ANNOTATION}: with pod certificates the kubelet gives the files to the "
                        f"pod's user itself (0600, or 0640 with securityContext.fsGroup) when all its containers run "
                        f"as one user or it has an fsGroup; {choices.key_mode:04o} applies only otherwise")
    elif choices.key_mode is not None and (spec.securityContext is None or spec.securityContext.fsGroup is None):
        warnings.append(f"{names.KEY_MODE_ANNOTATION}: without securityContext.fsGroup the files are root:root "
                        f"{choices.key_mode:04o}, readable by root (uid or group 0) only: set fsGroup for a non-root "
                        f"container")
    if names.KEYSTORE_ANNOTATION in annotations:
        warnings += keystore_warnings(annotations, choices)
    changes = []
    wanted = tuple(mounts)  # what a container without mounts lacks (one tuple for all of them)
    for field, position, container in targets:  # a container that lacks nothing is left out of the plan
        missing_mounts = _missing_mounts(container, wanted, paths)
        missing_env = _missing_env(container, env, warnings) if env else ()
        if missing_mounts or missing_env:
            changes.append(_new(ContainerChange, (field, position, missing_mounts, container.volumeMounts is not None,
                                                  missing_env, container.env != NO_ENV)))
    record = _record(choices, options, [container.name for _, _, container in targets], ca_fingerprints)
    wanted_annotations = {**pins, names.INJECTED_ANNOTATION: record} if pins else {names.INJECTED_ANNOTATION: record}
    state: MetadataState = "missing" if metadata is None else "present" if meta.get("annotations") is not None \
        else "no-annotations"
    # Positional, in the fields' order (a NamedTuple's keywords cost more than its fields).
    return _new(Plan, (choices.secret_name, record, tuple(new_volumes), spec.volumes is not None,
                       tuple(changes), _annotation_changes(annotations, wanted_annotations),
                       state, tuple(warnings)))


def plan_pod(pod: Mapping[str, Any], **settings: Any) -> Plan:
    """`plan_injection` for a pod as plain JSON or YAML decodes it (a manifest's pod template, `inject`):
    its spec typed first (`pod_spec`, which refuses one the API would not accept)."""
    return plan_injection(pod.get("metadata"), pod_spec(pod.get("spec")), **settings)


def _our_volumes(choices: Choices, options: InjectionOptions) -> list[tuple[str, Source, dict[str, Any], str]]:
    """(name, source, the source's contents, mount path) of each volume the pod gets, made for this pod."""
    if choices.mode == names.MODE_TRUST_ONLY:  # a client: the bundle alone (names.MODE_TRUST_ONLY)
        return [(names.TRUST_VOLUME, "configMap", {"name": options.trust_bundle_configmap}, choices.trust_path)]
    # The volumes holding a key get the mode the pod asked for (names.KEY_MODE_ANNOTATION), the whole volume's:
    # listing `items` to give tls.key alone a mode would drop the Secret's other keys (keystores, ca.crt).
    mode = {} if choices.key_mode is None else {"defaultMode": choices.key_mode}
    if choices.mode == names.MODE_POD_CERTIFICATE:
        ours: list[tuple[str, Source, dict[str, Any], str]] = [
            (names.CERT_VOLUME, "projected", {"sources": _pod_cert_sources(), **mode}, choices.cert_path),
            (names.TRUST_VOLUME, "projected", {"sources": [_bundle_source(names.BUNDLE_KEY)]}, choices.trust_path)]
    else:
        ours = [(names.CERT_VOLUME, "secret", {"secretName": choices.secret_name, **mode}, choices.cert_path),
                (names.TRUST_VOLUME, "configMap", {"name": options.trust_bundle_configmap}, choices.trust_path)]
    if choices.client_secret:  # its own volume and directory, read-only like the others (docs/mtls.md)
        ours.append((names.CLIENT_VOLUME, "secret", {"secretName": choices.client_secret, **mode},
                     choices.client_path))
    return ours


def _bundle_source(path: str) -> dict[str, Any]:
    # The reconciler's one bundle, by name: with `signerName` alone the kubelet selects nothing (an unset
    # labelSelector matches no bundle) and the pod never starts. Not optional: a pod must not start
    # trusting nothing (it waits until the bundle exists, like one whose Secret is not there yet).
    return {"clusterTrustBundle": {"name": names.CLUSTER_TRUST_BUNDLE, "path": path}}


# The pod-certificate mode: the same files at the same paths as the Secret and ConfigMap give. The key is
# made by the kubelet on the node and the certificate asked of our signer; ca.crt and ca-bundle.crt
# both come from the signer's ClusterTrustBundle. Made anew for each pod, as the other modes' are, so no
# two pods' volumes share an object.
def _pod_cert_sources() -> list[dict[str, Any]]:
    return [{"podCertificate": {"signerName": names.SIGNER_NAME, "keyType": names.POD_KEY_TYPE,
                                "certificateChainPath": names.CERT_FILE, "keyPath": names.KEY_FILE}},
            _bundle_source(names.CA_FILE)]


# (field, position, container): a plain tuple, unpacked where it is read (a NamedTuple costs ~3k
# instructions more to build, and a new template's plan builds one per container).
_Target = tuple[ContainerField, int, Container]


def _check_size(spec: PodSpec) -> None:
    count = len(spec.initContainers or ()) + len(spec.containers or ())
    if count > MAX_CONTAINERS:
        raise InjectionRefused(f"the pod has {count} containers; tls-injector injects pods of at most "
                               f"{MAX_CONTAINERS} (init containers included): split the workload, or label the "
                               f"pod {names.INJECT_LABEL}: \"{names.POD_OPT_OUT}\" to start it without TLS")


def _targets(spec: PodSpec, selected: frozenset[str] | None) -> list[_Target]:
    found: list[_Target] = []
    fields: tuple[tuple[ContainerField, list[Container] | None], ...] = (
        ("initContainers", spec.initContainers), ("containers", spec.containers))
    for field, containers in fields:
        for index, container in enumerate(containers or ()):
            if len(container.name) > MAX_CONTAINER_NAME:  # the record lists names: as bounded as the API's
                raise InjectionRefused(f"spec.{field}[{index}].name {shown(container.name)} is longer than a "
                                       f"container name may be ({MAX_CONTAINER_NAME} characters, a DNS label)")
            found.append((field, index, container))
    if selected is None:
        return found
    missing = sorted(selected - {container.name for _, _, container in found})
    if missing:
        raise InjectionRefused(
            f"{names.CONTAINERS_ANNOTATION} names container(s) the pod does not have: {shown(', '.join(missing))}"
        )
    return [target for target in found if target[2].name in selected]


def _volume(
    taken: Mapping[str, Volume], base: str, source: Source, identity: dict[str, Any]
) -> tuple[str, dict[str, Any] | None]:
    """The name of our volume in the pod (`taken`: its volumes by name), and the volume to add: None when
    the pod has it (matched by contents), else a new one under the first free name."""
    # One of the first len(taken) + 1 names is free, so the loop ends.
    name, suffix = base, 1
    while (existing := taken.get(name)) is not None:
        if _is_ours(existing.contents(source), identity):
            return name, None
        suffix += 1
        name = f"{base}-{suffix}"
    return name, {"name": name, source: identity}


def _is_ours(contents: object, identity: Mapping[str, Any]) -> bool:
    # The apiserver defaults defaultMode (420) before admission, so a reinvoked webhook sees it set.
    return (
        isinstance(contents, dict)
        and contents.keys() <= {*identity, "defaultMode"}
        and all(contents.get(k) == v for k, v in identity.items())
    )


def _missing_mounts(container: Container, wanted: tuple[dict[str, Any], ...],
                    paths: Mapping[str, object]) -> tuple[dict[str, Any], ...]:
    """Our mounts (`wanted`, whose paths are the keys of `paths`) the container lacks; refused when it
    mounts something else at one of their paths (its last mount at a path counts, as a map of them would)."""
    if not container.volumeMounts:
        return wanted
    # Only the container's mounts at one of our paths are kept: most containers have none there, and get
    # back all of `wanted` without a map of every mount they have.
    by_path: dict[str, VolumeMount] = {}
    for held in container.volumeMounts:  # a path remembered is read without the call (none is "": normpath's is ".")
        if (path := _normalised.get(held.mountPath) or _normpath(held.mountPath)) in paths:
            by_path[path] = held
    if not by_path:
        return wanted
    missing = []
    for mount in wanted:
        existing = by_path.get(mount["mountPath"])
        if existing is None:
            missing.append(mount)
        elif existing.name != mount["name"]:
            raise InjectionRefused(
                f"container {shown(container.name)} already mounts volume {shown(existing.name)} at "
                f"{mount['mountPath']}; "
                f"choose another path with {names.CERT_PATH_ANNOTATION} or {names.TRUST_PATH_ANNOTATION}, "
                f"or list the containers to inject in {names.CONTAINERS_ANNOTATION}"
            )
    return tuple(missing)


def _normpath(path: str) -> str:
    """posixpath.normpath(path), remembered (`_normalised`): a cluster's pods mount a few paths over and
    over (every container the API token's), and a path found costs ~0.5k instructions against ~2k to
    look at again, one per existing mount (callgrind: ~6k a review of the plan stream, four containers)."""
    known = _normalised.get(path)
    if known is None:
        known = _normalise(path)
        if len(path) <= _NORMALISED_LENGTH:  # a path of any length may be sent; only short ones are kept
            if len(_normalised) >= _NORMALISED_MAX:
                _normalised.clear()
            _normalised[path] = known
    return known


def _normalise(path: str) -> str:
    """posixpath.normpath(path), which is pure Python here (~2.8k instructions a call): an absolute path
    without '//', without a component starting with '.' and without a trailing '/' has no empty, '.' or
    '..' component to remove, so normpath returns it unchanged and is skipped."""
    if path[:1] == "/" and "//" not in path and "/." not in path and path[-1] != "/":
        return path
    return posixpath.normpath(path)


# Mount paths normalised so far, as `_normpath` found them. Bounded as choices.py's remembered choices are:
# at most 512 paths of at most 256 characters (a real path is far shorter); when full it starts again
# empty. Reads and writes are single dict operations (thread-safe).
_NORMALISED_MAX = 512
_NORMALISED_LENGTH = 256
_normalised: dict[str, str] = {}


def _missing_env(
    container: Container, env: Sequence[dict[str, Any]], warnings: list[str]
) -> tuple[dict[str, Any], ...]:
    if container.envFrom:
        # An `env` entry overrides whatever envFrom provides, and what envFrom provides is in objects the
        # webhook does not read: adding ours could override a value the user set, so add none.
        warnings.append(f"container {shown(container.name)} uses envFrom: TLS environment variables not added")
        return ()
    present = {e.name for e in container.env_names() or ()}
    return tuple(e for e in env if e["name"] not in present)


def _record(choices: Choices, options: InjectionOptions, containers: list[str], cas: Iterable[str]) -> str:
    native = choices.mode == names.MODE_POD_CERTIFICATE
    record: dict[str, Any] = {
        "v": RECORD_VERSION,
        "secret": "" if native or choices.mode == names.MODE_TRUST_ONLY else choices.secret_name,
        "bundle": f"clusterTrustBundle:{names.CLUSTER_TRUST_BUNDLE}" if native else options.trust_bundle_configmap,
        "certPath": choices.cert_path,
        "trustPath": choices.trust_path,
        "containers": containers,
        "env": choices.env,  # a tuple, written as the same JSON array
        "cas": sorted(set(cas)),
    }
    if native:
        record["mode"], record["signer"] = choices.mode, names.SIGNER_NAME
    elif choices.mode == names.MODE_TRUST_ONLY:
        record["mode"] = choices.mode
    if choices.client_secret:
        record["client"], record["clientPath"] = choices.client_secret, choices.client_path
    if choices.key_mode is not None:
        record["keyMode"] = f"{choices.key_mode:04o}"
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS).decode()  # sorted: the order built in is not read


def _annotation_changes(current: Mapping[str, Any], wanted: Mapping[str, str]) -> tuple[AnnotationChange, ...]:
    changes = []  # a loop, not a generator fed to tuple(): ~2k instructions less for the usual one change
    for key, value in wanted.items():
        if current.get(key) != value:
            changes.append(_new(AnnotationChange, (key, value, key in current)))
    return tuple(changes)


def _map(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InjectionRefused(f"{where} must be a map")
    return value
