"""The one name table: keras_attention.get."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import (
    AdditiveAttention,
    ConcatAttention,
    DotProductAttention,
    GeneralAttention,
    LocalAttention,
    MultiHead,
)
from keras_attention.registry import ATTENTION


@pytest.mark.parametrize(
    "name,cls",
    [
        ("dot", DotProductAttention),
        ("scaled_dot", DotProductAttention),
        ("general", GeneralAttention),
        ("additive", AdditiveAttention),
        ("concat", ConcatAttention),
        ("local", LocalAttention),
        ("multihead", MultiHead),
    ],
)
def test_names_give_layers_that_attend(rng, name, cls):
    layer = keras_attention.get(name)
    assert type(layer) is cls
    out, weights = layer(
        rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8)), return_attention_scores=True
    )
    weights = keras.ops.convert_to_numpy(weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert tuple(out.shape) == (2, 3, 8)


def test_defaults_and_overrides():
    assert keras_attention.get("scaled_dot").scale is True
    local = keras_attention.get("local")
    assert (local.window, local.mode, type(local.scorer)) == (4, "predictive", GeneralAttention)
    assert keras_attention.get("local", window=9, mode="last").window == 9
    assert keras_attention.get("multihead", num_heads=2).num_heads == 2


def test_layers_and_configs_pass_through():
    layer = AdditiveAttention(units=3)
    assert keras_attention.get(layer) is layer
    clone = keras_attention.get(keras.saving.serialize_keras_object(layer))
    assert type(clone) is AdditiveAttention and clone.units == 3


def test_the_table_is_the_only_one():
    """Models and recipes resolve names here: their choices are the table's."""
    from keras_attention_recipes import translate

    train = translate.parser()._subparsers._group_actions[0].choices["train"]
    (attention,) = [action for action in train._actions if action.dest == "attention"]
    assert set(attention.choices) == set(ATTENTION) | {"none"}
    assert keras_attention.registry.names() == tuple(ATTENTION)


@pytest.mark.parametrize(
    "call,pattern",
    [
        (
            lambda: keras_attention.get("cosine"),
            r"`identifier` must be one of \['dot', .*received 'cosine'",
        ),
        (
            lambda: keras_attention.get(GeneralAttention(), window=3),
            r"constructor arguments go with a mechanism name",
        ),
        (
            lambda: LocalAttention(MultiHead(2), window=2),
            r"`score` of LocalAttention must be a score layer",
        ),
        (lambda: LocalAttention("local", window=2), r"`score` of LocalAttention must be one of"),
    ],
)
def test_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_the_registry_imports_no_layer_module():
    """The mechanisms register themselves; the table knows none of them."""
    import ast

    tree = ast.parse(open(keras_attention.registry.__file__, encoding="utf-8").read())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("keras_attention")]


def test_a_new_mechanism_needs_no_edit_in_the_registry(rng):
    from keras_attention import registry

    @registry.register("negated_dot", scale=True)
    class NegatedDot(DotProductAttention):
        def score(self, query, key):
            return -super().score(query, key)

    try:
        assert registry.names()[-1] == "negated_dot"
        layer = keras_attention.get("negated_dot")
        assert type(layer) is NegatedDot and layer.scale is True
        query, value = rng.normal(size=(1, 2, 4)), rng.normal(size=(1, 3, 4))
        _, weights = layer(query, value, return_attention_scores=True)
        scores = -(query @ value.transpose(0, 2, 1)) / 2.0  # -q·k / sqrt(4)
        expected = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(weights), expected, atol=1e-5)
        with pytest.raises(ValueError, match=r"the name 'negated_dot' is already taken by"):
            registry.register("negated_dot")(GeneralAttention)
    finally:
        registry._TABLE.pop("negated_dot")
    assert registry.names() == tuple(ATTENTION)
