"""Registries: names, options, helpful errors."""
import dataclasses

import pytest

from nas.core.errors import RegistryError
from nas.core.registry import SAMPLERS, SPACES, Registry


def test_unknown_name_lists_available_and_suggests():
    with pytest.raises(RegistryError, match=r"strategy.sampler.name: unknown sampler 'sandwitch' "
                                            r"\(did you mean 'sandwich'\?\); available: .*sandwich.*uniform"):
        SAMPLERS.get("sandwitch")


def test_duplicate_registration_raises():
    registry = Registry("thing", "thing.name")
    registry.register("a")(object())
    with pytest.raises(RegistryError, match="registered twice"):
        registry.register("a")(object())


def test_options_must_be_a_dataclass():
    with pytest.raises(TypeError, match="must be a dataclass"):
        Registry("thing", "thing.name").register("a", options=dict)


def test_builtin_spaces_are_registered_with_option_dataclasses():
    entry = SPACES.get("mobilenetv3")
    assert dataclasses.is_dataclass(entry.options)
