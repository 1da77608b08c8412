"""Issue 39, point 3: the chart's `profiles` values reach the reconciler (which issues) and the webhook (its
dry-run previews) as the profile flags, only those that differ from the program's defaults (so the default
install stays the kustomize base), and the schema refuses what the flags would refuse."""

from __future__ import annotations

import pytest

from tests.shipping.test_chart import _args, _refused, template, values
from tls_injector.cli.parser import build_parser
from tls_injector.injection.profile import ProfileBounds, format_duration

PROFILES = {"defaultDuration": "720h", "minDuration": "48h", "maxDuration": "4380h", "minRenewBefore": "2h",
            "defaultKeyAlgorithm": "ecdsa-p384", "allowedKeyAlgorithms": ["ecdsa-p384", "rsa-3072"]}
FLAGS = ["--default-duration=720h", "--min-duration=48h", "--max-duration=4380h", "--min-renew-before=2h",
         "--default-key-algorithm=ecdsa-p384", "--allowed-key-algorithms=ecdsa-p384,rsa-3072"]


def test_the_charts_defaults_are_the_programs() -> None:
    objects = template()
    defaults = ProfileBounds()
    assert format_duration(defaults.default_duration) == "2160h"
    for name in ("tls-injector", "tls-injector-reconciler"):
        assert not [a for a in _args(objects, name) if "duration" in a or "key-algorithm" in a or "renew" in a]


def test_profile_values_reach_the_reconciler_and_the_webhook_as_flags_they_accept() -> None:
    objects = template(*values(profiles=PROFILES))
    parser = build_parser()
    for name in ("tls-injector", "tls-injector-reconciler"):
        args = _args(objects, name)
        assert [a for a in args if a in FLAGS] == FLAGS
        parsed = parser.parse_args(args)
        assert parsed.allowed_key_algorithms == "ecdsa-p384,rsa-3072"


@pytest.mark.parametrize(("profiles", "where"), [
    ({**PROFILES, "maxDuration": "365d"}, "/profiles/maxDuration"),
    ({**PROFILES, "defaultKeyAlgorithm": "rsa-1024"}, "/profiles/defaultKeyAlgorithm"),
    ({**PROFILES, "allowedKeyAlgorithms": []}, "/profiles/allowedKeyAlgorithms"),
    ({**PROFILES, "minRenewBefore": "-1h"}, "/profiles/minRenewBefore"),
])
def test_the_schema_refuses_profile_values_the_flags_would_refuse(profiles: dict[str, object], where: str) -> None:
    assert where in _refused(*values(profiles=profiles))
