"""read_choices remembers what a pod that sets no choice annotation gets: by its Secret's name, for the
options object it was made with, at most _UNCHOSEN_MAX names, refusals never remembered."""

from __future__ import annotations

import pytest

from tls_injector import names
from tls_injector.injection import choices
from tls_injector.injection.choices import InjectionOptions, InjectionRefused, read_choices


def test_a_pod_choosing_nothing_gets_the_remembered_choices_of_its_secret() -> None:
    options = InjectionOptions()
    first = read_choices("web-tls", {"unrelated": "x"}, options)
    assert read_choices("web-tls", {}, options) is first
    assert (first.secret_name, first.mode, first.env) == ("web-tls", names.MODE_SECRET, ())


def test_other_options_are_not_answered_from_the_memory_of_the_first() -> None:
    secret = read_choices("api-tls", {}, InjectionOptions())
    trust_only = read_choices("api-tls", {}, InjectionOptions(default_mode=names.MODE_TRUST_ONLY))
    assert secret.mode == names.MODE_SECRET
    assert (trust_only.mode, trust_only.env) == (names.MODE_TRUST_ONLY, names.TLS_ENV_VARS)


def test_a_pod_setting_a_choice_is_not_answered_from_memory() -> None:
    options = InjectionOptions()
    read_choices("db-tls", {}, options)
    chosen = read_choices("db-tls", {names.ENV_ANNOTATION: "true"}, options)
    assert chosen.env == names.TLS_ENV_VARS


def test_a_refused_name_is_refused_every_time_and_never_remembered() -> None:
    options = InjectionOptions()
    for _ in range(2):
        with pytest.raises(InjectionRefused, match="not a valid Secret name"):
            read_choices("Not_A_Name", {}, options)
    assert "Not_A_Name" not in choices._unchosen_by_name


def test_the_memory_holds_at_most_its_bound() -> None:
    options = InjectionOptions()
    for n in range(choices._UNCHOSEN_MAX + 1):  # one past the bound
        assert read_choices(f"w{n}-tls", {}, options).secret_name == f"w{n}-tls"
        assert len(choices._unchosen_by_name) <= choices._UNCHOSEN_MAX
    assert read_choices("w0-tls", {}, options).secret_name == "w0-tls"
