"""Ensemble decoding: several trained models of one vocabulary decode as
one, each step's next-token distributions combined.

With M members of weights w_m (Σ w_m = 1; default 1/M), the ensemble's
next-token log-probabilities are

    log p(y_t | y_<t, x) = log Σ_m w_m p_m(y_t | y_<t, x)        "probabilities"
    log p̃(y_t | y_<t, x) = Σ_m w_m log p_m(y_t | y_<t, x)        "log_probabilities"

The first (the default) is fairseq's `EnsembleModel` (a mixture of the
members' distributions); the second is Marian's and OpenNMT-tf's weighted
sum of log-probabilities (a product of experts), which the searches
renormalise with their own log-softmax. Each member keeps its own decoding
state (its encoder output, its cache); an ensemble is a `Seq2Seq`, so every
search, `generate`, `Translator` and its SavedModel export take it as they
take one model.

Example:

>>> import numpy as np
>>> from keras_attention.seq2seq import Ensemble, TransformerSeq2Seq
>>> members = [
...     TransformerSeq2Seq(source_vocab_size=20, target_vocab_size=20, hidden_dim=8,
...                        num_heads=2, num_layers=1, intermediate_dim=16, max_length=8)
...     for _ in range(2)
... ]
>>> ensemble = Ensemble(members)
>>> result = ensemble.generate(np.array([[1, 5, 6, 2]]), search="greedy")
>>> tuple(result["tokens"].shape)
(1, 5)
"""

import math

import keras
from keras import ops

from keras_attention.seq2seq.base import Seq2Seq
from keras_attention.validation import is_number

COMBINATIONS = ("probabilities", "log_probabilities")
SHARED = ("source_vocab_size", "target_vocab_size", "sos_id", "eos_id", "padding_id")


def combine_log_probs(log_probs, weights, combine):
    """The ensemble's log-probabilities from the members' `log_probs`
    (a list of `(..., V)` normalised log-probabilities) and `weights`
    (floats summing to 1), by `combine` (see the module docstring)."""
    stacked = ops.stack(log_probs, axis=0)  # (M, ..., V)
    shape = (len(weights),) + (1,) * (len(stacked.shape) - 1)
    if combine == "probabilities":
        log_weights = ops.reshape(ops.convert_to_tensor([math.log(w) for w in weights]), shape)
        return ops.logsumexp(stacked + log_weights, axis=0)
    return ops.sum(stacked * ops.reshape(ops.convert_to_tensor(weights), shape), axis=0)


@keras.saving.register_keras_serializable(package="keras_attention")
class Ensemble(Seq2Seq):
    """Several `Seq2Seq` models decoding as one (see the module docstring
    for the two combinations).

    Args:
        models: two or more `Seq2Seq` models (of any families) with the
            same source and target vocabulary sizes and the same `sos_id`,
            `eos_id` and `padding_id`; they must have been trained on the
            same vocabularies, which the ensemble cannot check. One model
            is accepted too (an ensemble of one equals the model).
        combine: "probabilities" (the default: the mean of the members'
            distributions, fairseq's) or "log_probabilities" (their mean
            log-probabilities, Marian's).
        weights: optional positive weights, one per model; normalised to
            sum to 1. Default: equal.
        search: the default decoding strategy of `generate`, as
            `Seq2Seq`'s.

    Call arguments:
        inputs: `(source (B, S), target_in (B, T))` token ids.

    Returns:
        the combined log-probabilities `(B, T, V)` (teacher forcing), what a
        single model's logits are to its loss and its searches.

    `max_length` is the smallest of the members' (None if none has one);
    `has_attention` holds when every member's attention is real, and a
    step's attention is the weighted mean of the members' that are.
    Quantizing an ensemble quantizes each member.
    """

    def __init__(self, models, combine="probabilities", weights=None, search=None, **kwargs):
        models = self._check_models(models)
        for name in SHARED:
            values = [getattr(model, name) for model in models]
            if len(set(values)) > 1:
                raise ValueError(
                    f"`models` of Ensemble must share `{name}` (one vocabulary, one set of "
                    f"special ids); received {name} = {values}."
                )
        first = models[0]
        super().__init__(
            sos_id=first.sos_id,
            eos_id=first.eos_id,
            padding_id=first.padding_id,
            search=search,
            **kwargs,
        )
        if combine not in COMBINATIONS:
            raise ValueError(
                f"`combine` of Ensemble must be one of {list(COMBINATIONS)}; received "
                f"combine={combine!r}."
            )
        self.models, self.combine = models, combine
        self.weights_given = None if weights is None else self._check_weights(weights, len(models))
        given = self.weights_given or [1.0] * len(models)
        self.model_weights = [float(w) / sum(given) for w in given]
        self.source_vocab_size = first.source_vocab_size
        self.target_vocab_size = first.target_vocab_size
        lengths = [m.max_length for m in models if getattr(m, "max_length", None) is not None]
        self.max_length = min(lengths) if lengths else None

    @staticmethod
    def _check_models(models):
        if isinstance(models, Seq2Seq) or not isinstance(models, (list, tuple)) or not models:
            raise ValueError(
                "`models` of Ensemble must be a non-empty list of Seq2Seq models; received "
                f"models={models!r}."
            )
        models = list(models)
        for index, model in enumerate(models):
            if not isinstance(model, Seq2Seq):
                raise ValueError(
                    f"`models` of Ensemble must hold Seq2Seq models; received "
                    f"{type(model).__name__} at index {index}."
                )
        return models

    @staticmethod
    def _check_weights(weights, count):
        if not isinstance(weights, (list, tuple)) or len(weights) != count:
            raise ValueError(
                f"`weights` of Ensemble must be a list of {count} numbers, one per model; "
                f"received weights={weights!r}."
            )
        for weight in weights:
            if not is_number(weight) or not math.isfinite(weight) or weight <= 0:
                raise ValueError(
                    "`weights` of Ensemble must be positive finite numbers; received "
                    f"weights={list(weights)!r}."
                )
        return [float(w) for w in weights]

    @property
    def has_attention(self):
        return all(model.has_attention for model in self.models)

    def build_layers(self):
        for model in self.models:
            if not model.built:
                model.build()

    def _combine(self, logits):
        """The ensemble's log-probabilities from the members' logits."""
        log_probs = [ops.log_softmax(ops.cast(x, "float32"), axis=-1) for x in logits]
        return combine_log_probs(log_probs, self.model_weights, self.combine)

    def encode(self, source, max_length=None, training=None):
        return {
            f"model_{i}": model.encode(source, max_length=max_length, training=training)
            for i, model in enumerate(self.models)
        }

    def decode_step(self, tokens, state, training=None):
        logits, states, attention = [], {}, []
        for i, model in enumerate(self.models):
            key = f"model_{i}"
            step_logits, states[key], step_attention = model.decode_step(
                tokens, state[key], training=training
            )
            logits.append(step_logits)
            attention.append(ops.cast(step_attention, "float32"))
        return self._combine(logits), states, self._mean_attention(attention)

    def _mean_attention(self, attention):
        real = [
            (weight, weights)
            for model, weight, weights in zip(self.models, self.model_weights, attention)
            if model.has_attention
        ]
        if not real:
            return attention[0]  # zeros: no member attends
        total = sum(weight for weight, _ in real)
        return sum(weights * (weight / total) for weight, weights in real)

    def teacher_forced(self, source, target_in, training=None, return_attention_scores=False):
        if return_attention_scores:
            raise ValueError(
                "`return_attention_scores` of Ensemble.teacher_forced must be False (an "
                "ensemble has no single attention map; `attention_weights` gives each "
                "member's); received return_attention_scores=True."
            )
        logits = [
            model.teacher_forced(source, target_in, training=training) for model in self.models
        ]
        return self._combine(logits)

    def reorder_state(self, state, indices):
        return {
            f"model_{i}": model.reorder_state(state[f"model_{i}"], indices)
            for i, model in enumerate(self.models)
        }

    def reorder_beams(self, state, indices):
        return {
            f"model_{i}": model.reorder_beams(state[f"model_{i}"], indices)
            for i, model in enumerate(self.models)
        }

    def attention_weights(self, source, target_in):
        maps = {}
        for i, model in enumerate(self.models):
            for name, weights in model.attention_weights(source, target_in).items():
                maps[f"model_{i}/{name}"] = weights
        return maps

    # -- quantization: each member's own --------------------------------------
    def quantize(self, mode="int8", config=None, **kwargs):
        """Quantize every member in place (`Seq2Seq.quantize`, which checks
        the arguments)."""
        for model in self.models:
            model.quantize(mode, config, **kwargs)
        self.train_function = self.test_function = self.predict_function = None
        if keras.backend.backend() == "torch":  # the parameters torch tracks changed
            self._track_variables()

    @property
    def quantization_mode(self):
        modes = {model.quantization_mode for model in self.models}
        return modes.pop() if len(modes) == 1 else "mixed"

    def get_config(self):
        config = {
            "models": [keras.saving.serialize_keras_object(model) for model in self.models],
            "combine": self.combine,
            "weights": self.weights_given,
        }
        if self.search is not None:
            config["search"] = keras.saving.serialize_keras_object(self.search)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["models"] = [keras.saving.deserialize_keras_object(m) for m in config["models"]]
        return cls(**config)
