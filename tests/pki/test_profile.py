"""Issue 39, point 3: a workload's certificate profile read from its pod template's annotations, each value
within the operator's bounds or refused with a reason and the default used. The whole legal range: every
key algorithm, each bound at the limit and one past, malformed values of every kind."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tls_injector import names
from tls_injector.injection.profile import (
    BUILT_IN,
    MAX_VALUE_CHARS,
    Profile,
    ProfileBounds,
    ProfileError,
    default_renew_before,
    format_duration,
    key_algorithms,
    parse_duration,
    resolve_profile,
    shared_profile,
)
from tls_injector.pki import KEY_TYPES, LEAF_LOOKAHEAD, LEAF_VALIDITY, generate_key, key_type_of
from tls_injector.pki.keys import _MAKERS

DURATION, RENEW, KEY = names.DURATION_ANNOTATION, names.RENEW_BEFORE_ANNOTATION, names.KEY_ALGORITHM_ANNOTATION
BOUNDS = ProfileBounds()
ONE_SECOND = timedelta(seconds=1)


def test_the_built_in_profile_is_the_renewal_table_of_app_pki() -> None:
    assert (BUILT_IN.duration, BUILT_IN.renew_before) == (LEAF_VALIDITY, LEAF_LOOKAHEAD)
    assert BOUNDS.default == BUILT_IN
    assert BUILT_IN.note() == "key-algorithm=ecdsa-p256,duration=2160h,renew-before=840h"


def test_nothing_asked_is_the_operators_default_and_no_refusal() -> None:
    resolved = resolve_profile({"other": "x"}, BOUNDS)
    assert (resolved.profile, resolved.refused, resolved.asked) == (BUILT_IN, (), False)


@pytest.mark.parametrize("algorithm", names.KEY_ALGORITHMS)
def test_every_key_algorithm_is_read_and_generated_as_named(algorithm: names.KeyAlgorithm) -> None:
    resolved = resolve_profile({KEY: algorithm.upper()}, BOUNDS)
    assert resolved.profile.key_algorithm == algorithm
    assert not resolved.refused
    assert key_type_of(generate_key(algorithm).public_key()) == algorithm


def test_the_key_makers_follow_the_names_in_order() -> None:
    assert tuple(_MAKERS) == KEY_TYPES == names.KEY_ALGORITHMS
    assert key_type_of(generate_key("ecdsa-p384").public_key()) == "ecdsa-p384"


@pytest.mark.parametrize(("text", "expected"), [
    ("24h", timedelta(hours=24)), ("8760h", timedelta(hours=8760)), ("1h30m", timedelta(minutes=90)),
    ("90m", timedelta(minutes=90)), ("3600s", timedelta(hours=1)), ("2160h0m0s", timedelta(hours=2160)),
    ("0001h", timedelta(hours=1)), ("1.5h", timedelta(minutes=90)), (".5h", timedelta(minutes=30)),
    ("1h0.5m", timedelta(minutes=60, seconds=30)), ("2159h59m60s", timedelta(hours=2160)),
    ("86400000ms", timedelta(hours=24)), ("1h1500ms", timedelta(hours=1, seconds=1)),  # whole seconds: 0.5 s dropped
    ("3600000000us", timedelta(hours=1)), ("3600000000µs", timedelta(hours=1)), ("1.h", timedelta(hours=1)),
    ("2562047h", timedelta(hours=2562047)),  # Go's longest whole hour
])
def test_durations_are_read_as_go_writes_them(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert parse_duration(format_duration(expected)) == expected


@pytest.mark.parametrize("text", ["", "90", "-1h", "+1h", "0h", "0s", "1d", "h", "1H", "1h 30m", "１h",
                                  "٩h", "1h\n", "ninety", "1e3h", "9999999999999h", "2562048h", ".h", "1..5h",
                                  "500ms", "999999us", "1.5", "1h.", "1hm"])
def test_malformed_durations_are_refused_with_why(text: str) -> None:
    with pytest.raises(ProfileError):
        parse_duration(text)


@pytest.mark.parametrize(("duration", "refused"), [
    ("24h", False), ("23h59m59s", True), ("8760h", False), ("8760h1s", True), ("10000000h", True),
    ("2160h", False), ("1h", True), ("36.5h", False), ("23.99h", True), ("8759.5h", False), ("8760.01h", True),
])
def test_duration_bounds_at_the_limit_and_one_past(duration: str, refused: bool) -> None:
    resolved = resolve_profile({DURATION: duration}, BOUNDS)
    assert bool(resolved.refused) is refused
    expected = BOUNDS.default_duration if refused else parse_duration(duration)
    assert resolved.profile.duration == expected
    assert resolved.profile.renew_before == default_renew_before(expected)  # renewal follows the duration


@pytest.mark.parametrize(("renew_before", "refused"), [
    ("1h", False), ("59m59s", True), ("1440h", False), ("1440h1s", True), ("2160h", True), ("840h", False),
])
def test_renew_before_bounds_at_the_limit_and_one_past(renew_before: str, refused: bool) -> None:
    """With the 2160h default duration: at least 1h, at most two thirds of it (1440h)."""
    resolved = resolve_profile({RENEW: renew_before}, BOUNDS)
    assert bool(resolved.refused) is refused
    assert resolved.profile.renew_before == (BUILT_IN.renew_before if refused else parse_duration(renew_before))


def test_renew_before_is_bounded_by_the_duration_asked_for() -> None:
    resolved = resolve_profile({DURATION: "24h", RENEW: "16h"}, BOUNDS)
    assert resolved.profile == Profile(names.DEFAULT_KEY_ALGORITHM, timedelta(hours=24), timedelta(hours=16))
    resolved = resolve_profile({DURATION: "24h", RENEW: "16h1s"}, BOUNDS)
    assert resolved.profile.renew_before == default_renew_before(timedelta(hours=24))  # 9h20m
    assert "two thirds of the duration 24h" in resolved.reason()


def test_a_refused_duration_bounds_renew_before_by_the_default_duration() -> None:
    resolved = resolve_profile({DURATION: "90", RENEW: "1000h"}, BOUNDS)
    assert resolved.profile.duration == BUILT_IN.duration
    assert resolved.profile.renew_before == timedelta(hours=1000)


@pytest.mark.parametrize("value", ["", " ", "90", "-1h", "10000000h", "ﬁve", "rsa\u200b-2048", "x" * (1 << 20),
                                   None, 90, ["2160h"], {"h": 1}])
def test_malformed_values_of_every_annotation_are_refused_and_the_default_used(value: object) -> None:
    for key in names.PROFILE_ANNOTATIONS:
        resolved = resolve_profile({key: value}, BOUNDS)
        assert resolved.profile == BUILT_IN
        assert resolved.asked
        [(name, why)] = resolved.refused
        assert name.startswith(key)
        assert why.startswith("refused: ")
        assert "the default" in why
        assert len(resolved.reason()) < 400  # a megabyte of input is not echoed


def test_a_megabyte_is_refused_by_its_length_before_it_is_parsed() -> None:
    resolved = resolve_profile({DURATION: "1" * (1 << 20) + "h"}, BOUNDS)
    assert f"over {MAX_VALUE_CHARS}" in resolved.reason()


@pytest.mark.parametrize("algorithm", names.KEY_ALGORITHMS)
def test_an_algorithm_the_operator_did_not_allow_is_refused(algorithm: names.KeyAlgorithm) -> None:
    others = tuple(a for a in names.KEY_ALGORITHMS if a != algorithm)
    bounds = ProfileBounds(allowed_key_algorithms=others, default_key_algorithm=others[0])
    resolved = resolve_profile({KEY: algorithm}, bounds)
    assert resolved.profile.key_algorithm == others[0]
    assert "not allowed by the operator" in resolved.reason()


def test_each_refused_value_is_replaced_alone() -> None:
    resolved = resolve_profile({DURATION: "720h", RENEW: "-1h", KEY: "dsa-1024"}, BOUNDS)
    assert resolved.profile == Profile(names.DEFAULT_KEY_ALGORITHM, timedelta(hours=720), timedelta(hours=280))
    assert [name.split(" ")[0] for name, _ in resolved.refused] == [RENEW, KEY]


@pytest.mark.parametrize("bounds", [
    {"min_duration": timedelta(0)}, {"min_duration": timedelta(hours=3000)}, {"max_duration": timedelta(hours=100)},
    {"default_key_algorithm": "rsa-4096", "allowed_key_algorithms": ("ecdsa-p256",)},
    {"min_renew_before": timedelta(hours=10)},  # over 35/90 of the 24h minimum duration (9h20m)
])
def test_bounds_that_contradict_themselves_are_refused(bounds: dict[str, object]) -> None:
    with pytest.raises(ProfileError):
        ProfileBounds(**bounds)  # type: ignore[arg-type]


def test_the_operators_key_algorithm_list() -> None:
    assert key_algorithms(" RSA-3072,ecdsa-p256 ,") == ("ecdsa-p256", "rsa-3072")
    for text in ("", "rsa-1024", "ecdsa-p256,dsa"):
        with pytest.raises(ProfileError):
            key_algorithms(text)


def test_workloads_sharing_a_secret_agree_or_get_the_default_whatever_their_order() -> None:
    rsa = resolve_profile({KEY: "rsa-3072"}, BOUNDS)
    p384 = resolve_profile({KEY: "ecdsa-p384"}, BOUNDS)
    assert shared_profile([("Deployment/a", rsa), ("Deployment/b", rsa)], BOUNDS) == (rsa.profile, "")
    first = shared_profile([("Deployment/a", rsa), ("Deployment/b", p384)], BOUNDS)
    second = shared_profile([("Deployment/b", p384), ("Deployment/a", rsa)], BOUNDS)
    assert first == second
    assert first[0] == BUILT_IN
    assert "different certificate profiles" in first[1]


def test_one_user_or_none_needs_no_comparison_and_the_users_of_a_conflict_are_named_by_str_in_order() -> None:
    class Ref:  # what discover passes: a workload reference, named only when the message needs it
        def __init__(self, name: str) -> None:
            self.name = name

        def __str__(self) -> str:
            return f"Deployment/{self.name}"

    rsa = resolve_profile({KEY: "rsa-3072"}, BOUNDS)
    p384 = resolve_profile({KEY: "ecdsa-p384"}, BOUNDS)
    assert shared_profile([(Ref("a"), rsa)], BOUNDS) == (rsa.profile, "")
    assert shared_profile([], BOUNDS) == (BOUNDS.default, "")
    _, why = shared_profile([(Ref("b"), p384), (Ref("a"), rsa), (Ref("c"), rsa)], BOUNDS)
    assert why.index("Deployment/a: key-algorithm=rsa-3072") < why.index("Deployment/b: key-algorithm=ecdsa-p384")


def test_the_key_of_a_certificate_is_named_for_every_algorithm_and_none_for_others() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    assert key_type_of(ec.generate_private_key(ec.SECP521R1()).public_key()) is None
    assert key_type_of(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()) is None
