"""The strict YAML reader: floats with exponents, no duplicates, no tags."""
import pytest

from nas.core import yaml_io
from nas.core.errors import ConfigError


def test_exponent_floats_without_a_dot_are_floats():
    data = yaml_io.loads("a: 1e-3\nb: 5e4\nc: -2E+2\nd: .inf\ne: 3\nf: '1e-3'\ng: 1.5")
    assert data == {"a": 0.001, "b": 50000.0, "c": -200.0, "d": float("inf"), "e": 3, "f": "1e-3", "g": 1.5}
    assert isinstance(data["e"], int)


def test_duplicate_keys_are_rejected_with_line():
    with pytest.raises(ConfigError, match=r"x.yaml: line 3, column 3: duplicate key 'b'"):
        yaml_io.loads("a:\n  b: 1\n  b: 2\n", "x.yaml")


@pytest.mark.parametrize("text", ["a: !!python/object/apply:os.system ['true']", "a: !custom 3",
                                  "a: !!python/name:os.system"])
def test_tags_never_build_objects(text):
    with pytest.raises(ConfigError, match="is not allowed"):
        yaml_io.loads(text)


def test_set_values_use_the_same_rules():
    assert yaml_io.parse_scalar("1e-3") == 0.001
    assert yaml_io.parse_scalar("[24, 28]") == [24, 28]
    assert yaml_io.parse_scalar("null") is None
    assert yaml_io.parse_scalar("true") is True
    assert yaml_io.parse_scalar("sgd") == "sgd"


def test_dump_and_load_round_trip():
    data = {"a": [1, 2.5, "x"], "b": {"c": None, "d": 1e-3}}
    assert yaml_io.loads(yaml_io.dumps(data)) == data
