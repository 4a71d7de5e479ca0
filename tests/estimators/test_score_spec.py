"""Score specs: one canonical spelling for equal specs, and a strict grammar refused in one line."""
from __future__ import annotations

import pytest

from estimators import Fused, build_estimator, canonical_spec
from estimators.macs import Macs
from estimators.score_spec import format_weight, parse_spec
from nas.core.errors import ConfigError, RegistryError


@pytest.mark.parametrize("specs, canonical", [
    (["naswot", " naswot ", "2*naswot", "2.0*naswot", "1*naswot", ".5*naswot"], "naswot"),
    (["macs+naswot", "naswot+macs", " naswot + macs ", "1*naswot+1.0*macs", "1.*macs+1e0*naswot"], "macs+naswot"),
    (["2*naswot+macs", "macs+2.0*naswot", "2.00 * naswot+macs", "20e-1*naswot+macs", "0.2e1*naswot+macs"],
     "macs+2*naswot"),
    (["0.5*synflow+jacov+macs", "macs+jacov+.5*synflow"], "jacov+macs+0.5*synflow"),
    (["1e20*naswot+macs", "100000000000000000000*naswot+macs"], "macs+1e20*naswot"),
    (["0.00001*naswot+macs", "1E-5*naswot+macs"], "macs+1e-05*naswot"),
])
def test_equal_specs_have_one_canonical_spelling(specs, canonical):
    assert {canonical_spec(spec) for spec in specs} == {canonical}
    assert canonical_spec(canonical) == canonical                 # the spelling reads back as itself


def test_parsed_weights_and_sorted_components():
    assert parse_spec("2.5*synflow + jacov") == [(1.0, "jacov"), (2.5, "synflow")]
    assert [format_weight(w) for w in (2, 2.0, 0.5, 1e20, 1.5e-7, 123456789.0)] == \
           ["2", "2", "0.5", "1e20", "1.5e-07", "123456789"]


def test_a_spec_of_one_component_is_its_estimator_and_a_fusion_is_named_canonically():
    assert type(build_estimator("2*macs")) is Macs
    fused = build_estimator("naswot + 2.0*macs")
    assert isinstance(fused, Fused) and fused.name == "2*macs+naswot"


@pytest.mark.parametrize("spec, message", [
    ("*naswot", "score: the weight of 'naswot' in '*naswot' must be a positive decimal number"),
    ("1_0*naswot+macs", "got '1_0'"),
    ("\u0662*naswot+macs", "got '\u0662'"),               # an Arabic-Indic two: float() reads it, the grammar does not
    ("\uff12*naswot+macs", "got '\uff12'"),               # a full-width two
    ("inf*naswot+macs", "got 'inf'"),
    ("nan*naswot+macs", "got 'nan'"),
    ("1e400*naswot+macs", "got '1e400'"),
    ("1e-320*naswot+macs", "got '1e-320'"),             # denormal
    ("0*naswot+macs", "got '0'"),
    ("-2*naswot+macs", "got '-2'"),
    ("0x10*naswot+macs", "got '0x10'"),
    ("2*3*naswot+macs", "got '2*3'"),
    ("1e308*naswot+1e308*macs", "score: the weights of '1e308*naswot+1e308*macs' sum beyond the largest float"),
    ("", "score: empty component in ''"),
    ("naswot+", "score: empty component in 'naswot+'"),
    ("naswot++macs", "score: empty component in 'naswot++macs'"),
    ("2*+macs", "score: empty component in '2*+macs'"),
    ("naswot+2*naswot", "score: 'naswot' appears twice in 'naswot+2*naswot'; give it one weight instead"),
    ("macs + 2.0*macs", "score: 'macs' appears twice"),
])
def test_specs_outside_the_grammar_are_one_line_naming_score(spec, message):
    with pytest.raises(ConfigError) as raised:
        canonical_spec(spec)
    assert str(raised.value).startswith("score: ") and message in str(raised.value)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError):
        build_estimator(spec)


def test_an_exponent_with_a_plus_is_outside_the_grammar_and_says_so():
    with pytest.raises(ConfigError) as raised:      # `+` joins components: not `1e` and `5*naswot`
        canonical_spec("macs + 1E+5 * naswot")
    assert str(raised.value) == ("score: '1E+5' in 'macs + 1E+5 * naswot': write an exponent without '+' "
                                 "(1e5, not 1e+5), since '+' joins components")


def test_fidelity_estimators_are_named_canonically_and_errors_name_estimators():
    from nas.engine.fidelity.estimators import parse_names

    assert parse_names("naswot + 2.0*macs, 2*macs+naswot, 1*synflow") == \
        ["supernet", "macs", "params", "2*macs+naswot", "synflow"]
    with pytest.raises(ConfigError, match=r"^estimators: the weight of 'macs' in '1_0\*macs\+naswot'"):
        parse_names("1_0*macs+naswot")
    with pytest.raises(RegistryError, match=r"^estimators: unknown estimator 'nasw'"):
        parse_names("macs,nasw+macs")


@pytest.mark.parametrize("config, default", [("fashion_mnist_cell201", "jacov+macs"), ("fashion_mnist_mbv3", "naswot"),
                                             ("fashion_mnist_vit", "macs+naswot+synflow")])
def test_fidelity_reports_the_space_default_and_its_fusion_with_the_supernet_by_default(config, default):
    """Without them, `auto` after `nas fidelity` could pick a score worse than the default it
    replaced, and never one that adds the supernet to it."""
    from nas import api
    from nas.engine.fidelity.estimators import default_names, parse_names

    space = api.build_space(api.load_config(config))
    names = parse_names(None, space)
    fusion = canonical_spec(f"supernet+{default}")
    assert names[-2:] == [default, fusion] or (default in names and names[-1] == fusion), names
    assert set(default_names()) | {default, fusion} == set(names)
    assert set(fusion.split("+")) == {"supernet", *default.split("+")}
