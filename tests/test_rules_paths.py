"""Field paths: one syntax for the rules file, the messages and the exported CEL."""

from __future__ import annotations

import pytest

from tls_injector.rules.cel import Environment
from tls_injector.rules.paths import MISSING, BadPath, cel_value_or_empty, format_path, get_path, parse_path


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("", ()),
        ("spec", ("spec",)),
        ("spec.template.metadata", ("spec", "template", "metadata")),
        ('labels["tls-injector.io/inject"]', ("labels", "tls-injector.io/inject")),
        ("labels['a.b/c']", ("labels", "a.b/c")),
        ('["quo\\"te"].x', ('quo"te', "x")),
    ],
)
def test_paths_parse_and_print_back(text: str, path: tuple[str, ...]) -> None:
    assert parse_path(text) == path
    if path:
        assert parse_path(format_path(path)) == path


@pytest.mark.parametrize(("text", "says"), [("spec..x", "column 6"), ("spec.", "column 6"), ("a[b]", "column 2"),
                                            ("1spec", "column 1"), ("a b", "column 2")])
def test_a_bad_path_says_where(text: str, says: str) -> None:
    with pytest.raises(BadPath, match=says):
        parse_path(text)


def test_get_path_tells_missing_from_null() -> None:
    obj = {"spec": {"tls": None, "n": "s"}}
    assert get_path(obj, ("spec", "tls")) is None
    assert get_path(obj, ("spec", "other")) is MISSING
    assert get_path(obj, ("spec", "n", "deeper")) is MISSING


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"spec": {"labels": {"a.b/c": {"x": 1}}}}, {"x": 1}),
        ({"spec": {"labels": {}}}, {}),
        ({"spec": {}}, {}),
        ({}, {}),
    ],
)
def test_the_exported_cel_reads_the_path_or_an_empty_object(obj: dict[str, object], expected: object) -> None:
    source = cel_value_or_empty("object", ("spec", "labels", "a.b/c"))
    assert Environment(["object"]).compile_any(source).value({"object": obj}) == expected
