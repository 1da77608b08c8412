"""The /mutate handler: Pod CREATE in, the injection's JSON Patch out; Job CREATE of a CronJob's run in,
the pin of the CronJob's Secret out (see jobs.py).

One path. The review is decoded once at the edge into `MutateRequest`: the envelope, the object's
metadata (built: the plan reads its labels, annotations, owners and names) and what the plan reads of
its spec, typed (`PodSpec`: volumes, and each container's name, mounts, env list and envFrom; the rest,
most of a spec's bytes, skipped; `oldObject` is checked to be an object and skipped). The env list is kept
as JSON text: only a pod that may get the TLS variables has it read (its names: choices.may_add_env), and
the others' are dropped before the key is written, since their values would make templates that get the
same answer look different. The answer to a pod is a pure function of its naming inputs
(`naming_inputs`), that typed spec and the CA fingerprints, so one memo sits in front of that function
(`Answers`), keyed by exactly those, written as JSON: every replica of a template gets the answer planned
for the first.

No side effects and no Kubernetes API calls, so a dry-run gets exactly the patch a real request would.
The CA fingerprints for the record come from a callable (the reconciler keeps them current); the
webhook never asks the apiserver for them on the request path.

The namespace does not enter the plan: the Secret and ConfigMap a pod mounts are always in the pod's own
namespace, so nothing here reads metadata.namespace (empty on controller-created pods).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from tls_injector import names
from tls_injector.admission import AdmissionResponse, Request, Route, Skipped, allowed, decoder, denied, patched
from tls_injector.injection.answers import Answer, Answers
from tls_injector.injection.choices import InjectionOptions, InjectionRefused, may_add_env
from tls_injector.injection.jobs import job_pin_ops
from tls_injector.injection.patch import patch_ops
from tls_injector.injection.plan import plan_injection
from tls_injector.injection.podspec import NO_ENV, PodSpec
from tls_injector.injection.workload import naming_inputs

FingerprintSource = Callable[[], Sequence[str]]
# The memo's key: what a pod's answer is a function of, as JSON (Structs and plain values in one call).
_KEY_ENCODER = msgspec.json.Encoder()


class PodObject(msgspec.Struct):
    """What /mutate reads of the object: a Pod's (or a Job's) metadata and, typed, its spec."""

    metadata: Any = None
    spec: PodSpec | None = None


class MutateRequest(Request, kw_only=True):
    object: PodObject | None = None
    oldObject: Skipped | None = None
    subResource: Any = None  # pods/binding, pods/eviction: not an object being created


def no_fingerprints() -> Sequence[str]:
    return ()


def make_mutate_handler(options: InjectionOptions, *, ca_fingerprints: FingerprintSource = no_fingerprints,
                        answers: Answers | None = None) -> Route[MutateRequest]:
    """/mutate's route; `ca_fingerprints` returns the trust bundle's CA fingerprints right now; `answers`
    is the memo (a fresh one of MAX_ENTRIES by default; `Answers(max_entries=0)`: every pod is planned)."""
    answers = Answers() if answers is None else answers

    def pod_answer(metadata: object, spec: PodSpec | None, fingerprints: Sequence[str]) -> Answer:
        """The answer to a pod, without its uid: a pure function of what it is given."""
        try:
            plan = plan_injection(metadata, spec, options=options, ca_fingerprints=fingerprints)
        except InjectionRefused as refusal:
            # 422, as the apiserver answers an invalid object: the pod as written cannot be injected.
            return Answer.of(denied("", f"tls-injector: {refusal}", code=422, reason="Invalid"))
        return Answer.of(allowed("", warnings=plan.warnings), patch_ops(plan))

    def mutate(request: MutateRequest) -> AdmissionResponse:
        pod, kind, uid = request.object, request.kind, request.uid
        if pod is None or request.operation != "CREATE" or request.subResource:
            return allowed(uid)
        if kind.group == "batch" and kind.kind == "Job":
            template = pod.spec.template if pod.spec is not None else None
            return patched(uid, job_pin_ops(pod.metadata, template))
        if kind.group != "" or kind.kind != "Pod" or _opted_out(pod.metadata):
            return allowed(uid)
        if pod.spec is not None and not may_add_env(_annotations(pod.metadata), options):
            _forget_env(pod.spec)
        fingerprints = tuple(ca_fingerprints())
        return answers.respond(uid, lambda: _key_text(pod.metadata, pod.spec, fingerprints),
                               lambda: pod_answer(pod.metadata, pod.spec, fingerprints))

    return Route(decoder(MutateRequest), mutate)


def _key_text(metadata: object, spec: PodSpec | None, fingerprints: Sequence[str]) -> bytes | None:
    """Everything the pod's answer is a function of, as JSON; None when it cannot be written (then the
    pod is planned every time)."""
    if not isinstance(metadata, Mapping):
        return None
    try:
        return _KEY_ENCODER.encode((naming_inputs(metadata), fingerprints, spec))
    except (msgspec.EncodeError, OverflowError, RecursionError):  # past 64 bits; nesting past the limit
        return None


def _annotations(metadata: object) -> Mapping[str, Any]:
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def _forget_env(spec: PodSpec) -> None:
    """Drop the env lists nothing will read, so that the memo's key does not hold them: their values differ
    between templates whose pods get the same answer (a new image tag's, a changed setting's)."""
    for containers in (spec.initContainers, spec.containers):
        for container in containers or ():
            container.env = NO_ENV


def _opted_out(metadata: object) -> bool:
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and labels.get(names.INJECT_LABEL) == names.POD_OPT_OUT
