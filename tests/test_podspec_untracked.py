"""The spec's leaf Structs are made without the garbage collector's header (msgspec's gc=False), which is
safe only while they hold nothing that could close a reference cycle: strings and raw JSON text. A review's
decode makes dozens of them; so made, the whole server runs ~8k fewer instructions a replica review
(python -m bench.instructions)."""

from __future__ import annotations

import msgspec
import pytest

from tls_injector.injection.podspec import EnvVar, Volume, VolumeMount, pod_spec

LEAVES = (Volume, VolumeMount, EnvVar)


@pytest.mark.parametrize("struct", LEAVES, ids=lambda s: s.__name__)
def test_a_leaf_struct_is_made_without_the_collectors_header(struct: type[msgspec.Struct]) -> None:
    assert struct.__struct_config__.gc is False


@pytest.mark.parametrize("struct", LEAVES, ids=lambda s: s.__name__)
def test_a_leaf_struct_holds_nothing_that_could_close_a_cycle(struct: type[msgspec.Struct]) -> None:
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        assert isinstance(field.type, msgspec.inspect.StrType | msgspec.inspect.RawType), field.name


def test_a_spec_decodes_into_them_as_before() -> None:
    spec = pod_spec({"volumes": [{"name": "data", "secret": {"secretName": "s"}}],
                     "containers": [{"name": "app", "env": [{"name": "A", "value": "1"}],
                                     "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]})
    assert spec is not None
    assert spec.volumes == [Volume(name="data", secret=msgspec.Raw(b'{"secretName":"s"}'))]
    assert spec.containers is not None
    assert spec.containers[0].env == msgspec.Raw(b'[{"name":"A","value":"1"}]')  # kept as text until read
    assert spec.containers[0].env_names() == [EnvVar(name="A")]
    assert spec.containers[0].volumeMounts == [VolumeMount(name="data", mountPath="/d")]
