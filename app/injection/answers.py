"""Remembered /mutate answers: every replica of a template gets the same plan, so it is made once.

A Deployment's rollout or scale-up sends the webhook hundreds of pods that differ only in their name,
uid and timestamps; the plan reads none of these (see `naming_inputs`), so the answer — patch, warnings
or refusal — is a pure function of the pod's spec, the metadata the plan reads, and the CA
fingerprints. Measured in-process on a 4 KB pod: planning and encoding the patch ~70-100 us, building
the key and finding the answer ~5 us.

Bounded on purpose, since the key is what a client sent: at most MAX_ENTRIES answers (the oldest is
dropped first), and pods whose key is over MAX_KEY_BYTES are planned every time and never stored.

One name in a pod's spec differs between replicas all the same: the ServiceAccount admission plugin, which
runs before any webhook, adds the API token volume `kube-api-access-` + 5 random characters (the
apiserver's generateName) and mounts it in every container. Keyed on the spec as sent, no replica would
ever find its template's answer. So `shape_key` stands a placeholder in for that one name, and an answer
is remembered under such a key only when it does not contain the name (see `shape_key`).

Where pods never repeat (one-off pods, a template per pod: the yardstick's plan stream), the memo is all
cost and no return: the key is a third of what planning such a pod costs (~56k of ~170k instructions in
process: the key's JSON, its hash, the token swap). So after IDLE_AFTER look-ups in a row that found
nothing, it steps aside: pods are planned without a key, and one in SAMPLE_EVERY still goes through it (key,
look-up, store), so the first template whose pods repeat finds its answer within a few of its pods and turns
the memo back on. The answers are the same either way (a pure function of the pod); only the cost moves.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import NamedTuple

import orjson

from tls_injector.admission import AdmissionResponse, JsonPatchOp, with_patch

# Distinct pod templates a cluster creates pods from at once is in the hundreds; 512 answers of at most
# 16 KiB of key each bounds the memory at 8 MiB. Real pod specs are 1-8 KB of JSON.
MAX_ENTRIES = 512
MAX_KEY_BYTES = 16 * 1024
# A memo full of answers none of which was asked for again: as many misses in a row as it holds. Then one
# pod in 16 is keyed: a rollout's replicas (dozens of pods) turn it back on within about 32 of its pods.
IDLE_AFTER = MAX_ENTRIES
SAMPLE_EVERY = 16

# The token volume's name as JSON text: the apiserver's generated suffix is 5 lower-case letters and digits.
TOKEN_PREFIX = b'"kube-api-access-'
TOKEN_SUFFIX = re.compile(rb'[a-z0-9]{5}"')
TOKEN_PLACEHOLDER = TOKEN_PREFIX + b'*"'  # not a valid volume name, so no pod carries it
_PREFIX = TOKEN_PREFIX[1:]  # in an answer: a name quoted, cut, or part of a longer one
_new = tuple.__new__


def shape_key(text: bytes) -> tuple[bytes, bytes | None]:
    """(key, the token volume name it stands for) for a pod's key text (naming inputs, CA fingerprints and
    the typed spec, as JSON written by msgspec's encoder: every string written out, none escaped but `"`,
    `\\` and control characters, so no `\\u` escape can write a name the scan does not see).

    The name is replaced only when the text holds exactly one distinct such name and no placeholder (every
    occurrence of the prefix begins the first one found: as many as were replaced): then the key and the name
    give back the text exactly, so two pods share a key only when their texts differ in that one name,
    everywhere it occurs. The plan compares names only with each other and with its own
    (`tls-injector-*`), so such pods get the same plan but for that name; an answer that contains the
    name must therefore not be shared (`shareable`). Otherwise (no token volume, automount off; or
    several candidates) the text is the key as it is, marked so the two kinds of key never meet."""
    at = text.find(TOKEN_PREFIX)
    if at >= 0 and TOKEN_SUFFIX.match(text, at + len(TOKEN_PREFIX)):
        name = text[at:at + len(TOKEN_PREFIX) + 6]  # the prefix, 5 characters and the closing quote
        # split and join, not replace: replace scans the text twice for the name (to count, then to copy),
        # split once: ~2k instructions less for a 1.3 KB key (cachegrind).
        around = text.split(name)
        if text.count(TOKEN_PREFIX) == len(around) - 1:  # every occurrence of the prefix begins the name
            around[0] = b"~" + around[0]
            return TOKEN_PLACEHOLDER.join(around), name
    return b"=" + text, None


class Answer(NamedTuple):
    """A pod's answer, made once for every pod of its key."""

    response: AdmissionResponse  # its uid left blank: `Answers.respond` writes the pod's in (in a copy, if kept)
    document: bytes  # its patch as JSON text (b"": none), read by `shareable` and not remembered

    @classmethod
    def of(cls, response: AdmissionResponse, ops: Sequence[JsonPatchOp] = ()) -> Answer:
        """`response` (uid blank) as an answer, with `ops` as its patch if there are any. Built with
        tuple.__new__, as the plan's records are (tls_injector.injection.plan): the NamedTuple's own __new__
        is a Python call more."""
        document = orjson.dumps(ops) if ops else b""
        return _new(cls, (with_patch(response, document), document))

    @property
    def quotes_token(self) -> bool:
        """Whether the prefix of a token volume's name is written in it somewhere (see `shareable`). Read from
        the patch's JSON, before base64, and from the response's: base64 has no `-` (the prefix has three),
        so its text can hold none, and every other value is looked into as written. Asked only of an answer
        to be remembered: where the memo stands aside (the plan stream), the two scans, ~5k instructions a
        new plan (callgrind), are not made (bytes.find: `in` cost 1k more a text)."""
        return self.document.find(_PREFIX) >= 0 or orjson.dumps(self.response).find(_PREFIX) >= 0


def shareable(answer: Answer, token: bytes | None) -> bool:
    """May `answer`, made for a pod whose key stands in for `token`, serve that key's other pods? Not when
    any part of the name is in it: in a message, a warning, or the patch. The prefix is what is looked
    for, not the whole name: a message quotes values cut to a length, so it may hold the prefix and only
    the first characters of the suffix, and still differ between pods. A prefix found where it names
    no pod's token (a user's own `kube-api-access-` name) only keeps the answer from being remembered:
    planned again next time, never a wrong one shared."""
    return token is None or not answer.quotes_token


class Answers:
    """The memo in front of a pod's answer: by its key text (`shape_key`), the response with its uid left blank."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_key_bytes: int = MAX_KEY_BYTES,
                 idle_after: int = IDLE_AFTER) -> None:
        # An OrderedDict, whose oldest entry is dropped in constant time: a plain dict's first live entry is
        # found by stepping over the deleted slots before it, ~5k instructions a store once full (callgrind,
        # the yardstick's `plan` stream: every review a new key, so every review a store).
        self._entries: OrderedDict[bytes, AdmissionResponse] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries, self.max_key_bytes, self.idle_after = max_entries, max_key_bytes, idle_after
        self.hits = self.misses = 0
        self._missed_in_row = 0  # look-ups since the last that found an answer
        self._skipped = 0  # pods planned without a look-up while stepped aside, for the sampling

    def respond(self, uid: str, key_text: Callable[[], bytes | None], make: Callable[[], Answer]) -> AdmissionResponse:
        """The answer for the pod whose key text `key_text()` gives, with its uid: remembered, or `make()`'s,
        then remembered when it may be shared. A pod with no key text, or a longer one, is planned each time;
        so is a pod the memo steps aside for (module docstring), without its key text being written. `make`
        makes a new answer at every call: one not remembered is given the uid in place."""
        if self.max_entries <= 0:
            return _own(make(), uid)
        if self._missed_in_row >= self.idle_after:
            self._skipped += 1
            if self._skipped % SAMPLE_EVERY:
                return _own(make(), uid)
        text = key_text()
        if text is None or len(text) > self.max_key_bytes:
            return _own(make(), uid)
        key, token = shape_key(text)
        response = self._entries.get(key)
        if response is not None:
            self.hits += 1
            self._missed_in_row = 0
            return _with_uid(response, uid)
        self.misses += 1
        self._missed_in_row += 1
        answer = make()
        if shareable(answer, token):
            self._store(key, answer.response)
        return _with_uid(answer.response, uid)

    @property
    def stepped_aside(self) -> bool:
        """Whether pods are, for now, planned without a key (all but one in SAMPLE_EVERY)."""
        return self._missed_in_row >= self.idle_after

    def _store(self, key: bytes, response: AdmissionResponse) -> None:
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.popitem(last=False)
            self._entries[key] = response

    def __len__(self) -> int:
        return len(self._entries)


def _with_uid(remembered: AdmissionResponse, uid: str) -> AdmissionResponse:
    """The pod's own response: a copy of the remembered one (it serves many pods) with its uid, in the
    place the blank one held, so the keys keep their order."""
    response = remembered.copy()
    response["uid"] = uid
    return response


def _own(answer: Answer, uid: str) -> AdmissionResponse:
    """The response of an answer made for this pod alone and not remembered: its uid written in place (no
    copy: `make` makes a new answer at every call)."""
    response = answer.response
    response["uid"] = uid
    return response
