"""Properties of the CA state machine under any sequence of facts, additions and clock jumps."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.pki.conftest import NOW
from tls_injector.pki import (
    SETTLE,
    CaSet,
    CaState,
    CertKey,
    TrustFacts,
    add_ca,
    advance,
    decode,
    encode,
    fingerprint,
    make_ca,
)

# A handful of CAs made once: key generation is the slow part, and identity is all the machine sees.
POOL: list[CertKey] = [make_ca(common_name=f"pool {i}", now=NOW) for i in range(4)]
ORDER = list(CaState)

step = st.one_of(
    st.tuples(st.just("add"), st.integers(0, len(POOL) - 1)),
    st.tuples(st.just("advance"), st.sets(st.integers(0, len(POOL) - 1)), st.sets(st.integers(0, len(POOL) - 1)),
              st.sampled_from([timedelta(0), SETTLE, timedelta(days=1)])),
)


def _fps(indexes: set[int]) -> frozenset[str]:
    return frozenset(fingerprint(POOL[i].cert) for i in indexes)


# database=None: nothing written into the working tree; 80 examples of up to 25 steps run in ~2 s.
@settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=25))
def test_any_run_keeps_one_signer_and_only_trusted_everywhere_cas_ever_sign(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    cas, now = add_ca(CaSet(), POOL[0], now=NOW), NOW
    seen_everywhere: set[str] = {fingerprint(POOL[0].cert)}  # the first CA signs before any bundle exists
    for op in steps:
        before = cas
        if op[0] == "add":
            cas = add_ca(cas, POOL[op[1]], now=now)
        else:
            _, everywhere, used, jump = op
            now += jump
            facts = TrustFacts(_fps(everywhere), _fps(used))
            cas = advance(cas, facts, now=now)
            seen_everywhere |= {fp for fp in facts.in_every_bundle if fp in before.states()}
            _check_moves(before, cas, facts)
        assert len(cas.in_state(CaState.TRUSTED_USED)) == 1, cas.states()
        signer = cas.signer()
        assert signer is not None
        assert fingerprint(signer.cert) in seen_everywhere
        assert encode(decode(encode(cas))) == encode(cas)


def _check_moves(before: CaSet, after: CaSet, facts: TrustFacts) -> None:
    """Forward only, one step at a time; leaving needs a zombie (or an expired CA); a zombie never had a
    leaf in use when it became one."""
    old = before.states()
    for fp, state in after.states().items():
        assert fp in old
        assert ORDER.index(state) - ORDER.index(old[fp]) in (0, 1)
        if state is CaState.ZOMBIE and old[fp] is CaState.PHASE_OUT:
            assert fp not in facts.leaf_issuers
    for fp in set(old) - set(after.states()):
        assert old[fp] in (CaState.ZOMBIE, CaState.PHASE_OUT)
