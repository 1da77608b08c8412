"""What the injection reads of a pod's spec, typed: decoded once, at the edge, and never as a whole.

`/mutate` decodes a review's spec straight into these Structs (tls_injector.injection.mutate), in the same pass
as the envelope; `inject` converts a manifest's pod template into them (`pod_spec`). Either way the plan
(tls_injector.injection.plan) is a function of this and the pod's metadata only, and everything else in a spec
(images, probes, resources: most of its bytes) is skipped, not built.

Typed as the Kubernetes API types them (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/):
a container's `name` is a required string, as are a volume's, a volume mount's `name` and `mountPath`
and an env var's `name`. The apiserver decodes a pod into its Go types before any webhook sees it, so it
never sends anything else; a body that does is refused by the decode with the path of the field (a 400 at
the edge, a refusal naming the template for `inject`). The env list alone is kept as JSON text and checked
when it is read (`Container.env_names`: a 422 naming the container), which only a pod that asks for the
TLS variables has done.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from tls_injector.admission import Skipped, clip
from tls_injector.injection.choices import InjectionRefused, shown

# A refusal quotes the decoder's reason (a type and a path in the spec), cut to this many characters.
_MAX_REASON = 300
_NULL = msgspec.Raw(b"null")
NO_ENV = _NULL  # a container's env when it has none, or when nothing will read it (mutate.py)

# The volume sources the plan's own volumes use.
Source = Literal["secret", "configMap", "projected"]


# gc=False on the leaf Structs (strings and raw JSON text only, so no instance can be part of a reference
# cycle): each is allocated and freed without the collector's header and bookkeeping, and a review's decode
# makes dozens (one per env variable and mount): ~8k instructions less a review (bench.instructions).
# Keep their fields atomic (tests/test_podspec_untracked.py holds them to it).
class Volume(msgspec.Struct, omit_defaults=True, gc=False):
    """A volume: its name, and the contents of the sources the plan's own volumes use, as JSON text (read
    only for a volume with the name of one of ours, to tell whether it is ours; any other source is
    skipped: the API allows one source per volume, so a volume with ours is not something else too)."""

    name: str
    secret: msgspec.Raw = _NULL
    configMap: msgspec.Raw = _NULL
    projected: msgspec.Raw = _NULL

    def contents(self, source: Source) -> object:
        raw = self.secret if source == "secret" else self.configMap if source == "configMap" else self.projected
        return msgspec.json.decode(raw)


class VolumeMount(msgspec.Struct, gc=False):
    name: str
    mountPath: str


class EnvVar(msgspec.Struct, gc=False):
    name: str


class Container(msgspec.Struct, omit_defaults=True):
    """A container, an init container or a native sidecar, as the plan reads it."""

    name: str
    volumeMounts: list[VolumeMount] | None = None
    # The env list as the review wrote it, decoded (`env_names`) only for a pod that asks for the TLS
    # variables, the one case the plan reads it: the yardstick's pod has 40 variables, whose names, decoded
    # at every review, cost the whole server ~28k instructions a new plan (6 %; bench.instructions).
    env: msgspec.Raw = NO_ENV
    envFrom: list[Skipped] | None = None  # only whether there is any is read

    def env_names(self) -> list[EnvVar] | None:
        """The env list's names (None when there is no list); InjectionRefused, with the container's name
        and the decoder's reason, for one the API would not accept."""
        try:
            found: list[EnvVar] | None = _ENV_LISTS.decode(self.env)
        except msgspec.ValidationError as error:
            reason = str(error).replace("`$", "`env", 1)  # the path within the list, as the spec names it
            raise InjectionRefused(clip(f"invalid pod spec: container {shown(self.name)}: env: {reason}",
                                        _MAX_REASON)) from None
        return found


class JobPodTemplate(msgspec.Struct):
    """A Job's pod template, as the CronJob pin reads it (tls_injector.injection.jobs): its metadata only."""

    metadata: Any = None


class PodSecurityContext(msgspec.Struct, omit_defaults=True, gc=False):
    """What the plan reads of a pod's securityContext: whether it sets fsGroup (a key mode without it leaves
    the files root:root, which only root reads: names.KEY_MODE_ANNOTATION)."""

    fsGroup: int | None = None


class PodSpec(msgspec.Struct, omit_defaults=True):
    """A Pod's spec as the plan reads it; a Job's spec shares the type for its `template` (a review's
    object is decoded before its kind is looked at, and a Pod has no `template`, a Job no containers)."""

    volumes: list[Volume] | None = None
    initContainers: list[Container] | None = None
    containers: list[Container] | None = None
    template: JobPodTemplate | None = None
    securityContext: PodSecurityContext | None = None


def pod_spec(value: object) -> PodSpec | None:
    """A pod spec decoded from JSON or YAML (plain dicts and lists) in its typed form; None for none.
    Written as JSON and decoded as /mutate decodes a review's spec, so both read a spec alike; raises
    InjectionRefused, with the field's path, for one the API would not accept."""
    if value is None:
        return None
    try:
        return _SPECS.decode(msgspec.json.encode(value))
    except (msgspec.ValidationError, msgspec.EncodeError, TypeError, ValueError) as error:
        reason = f"invalid pod spec: {str(error).replace('`$.', '`spec.', 1)}"
        raise InjectionRefused(clip(reason, _MAX_REASON)) from None


_SPECS = msgspec.json.Decoder(PodSpec)
_ENV_LISTS = msgspec.json.Decoder(list[EnvVar] | None)
