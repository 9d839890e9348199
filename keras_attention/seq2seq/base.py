"""The one interface of the encoder-decoder families, and the contract
generation relies on.

Every `Seq2Seq` implements:

    logits = model((source, target_in))                  teacher forcing, (B, T, V)
    state = model.encode(source, max_length)             a nest of batch-major tensors
    logits, state, attention = model.decode_step(tokens, state)
                                                         one position: (B, V), the new
                                                         state, and this step's source
                                                         attention (B, S)
    state = model.reorder_state(state, indices)          gather along the batch (beams)
    state = model.reorder_beams(state, indices)          the same for beam search's step,
                                                         leaving `beam_invariant_state()`
                                                         as it is
    weights = model.attention_weights(source, target_in) {name: (B, [H,] T, S)}

Generation: `model.generate(source, search=None, prefix=None)` runs a
decoding strategy of `search.py` (the one given, else the model's default,
set by `compile(..., search=...)` or the constructor's `search`, else
greedy search), as KerasHub's `generate` runs the sampler given to
`compile`.

`attention` is what generation records as the alignment of a hypothesis:
the family's own summary of where the step looked (the mean over heads and
layers, or zeros for a model without attention). The state is private to
the family: generation never reads inside it.

Training is Keras's own `fit` on every backend: `call(..., training=True)`
consults the model's `ScheduledSampling`, if any, and otherwise teaches
with the ground truth (`teacher_forcing.py`).
"""

import keras
import numpy as np
from keras import ops

from keras_attention import compat, quantization
from keras_attention.seq2seq.scheduled_sampling import ScheduledSampling, scheduled_sampling_logits
from keras_attention.seq2seq.search import get_search
from keras_attention.seq2seq.search_base import Search
from keras_attention.validation import (
    check_ids_in_range,
    check_integer_dtype,
    check_positive_int,
    check_same_batch,
    check_token_id,
    check_token_ids,
)

TOKENS = (None, None)  # the shape of any token batch: (B, T)


def _check_quantization(value, owner):
    """The constructor's `quantization`: None, "int8", or a serialized
    int8 `QuantizationConfig` (what `get_config` writes)."""
    if value is None or value == quantization.MODE:
        return value
    if isinstance(value, dict):
        config = keras.saving.deserialize_keras_object(value)
        if isinstance(config, keras.quantizers.QuantizationConfig):
            quantization.check_mode(None, config, owner)
            return value
    raise ValueError(
        f"`quantization` of {owner} must be None, {quantization.MODE!r} or a serialized "
        f"Int8QuantizationConfig (set by quantize()); received quantization={value!r}."
    )


def _quantization_config(value):
    """The `QuantizationConfig` for `quantize_layers` of a `quantization`
    value (None for "int8": the default, weight-only)."""
    return None if value == quantization.MODE else keras.saving.deserialize_keras_object(value)


def _pop(state, path, owner):
    """`(state without path, the value at path)`; the dicts along `path`
    are copied, never changed."""
    head, rest = path[0], path[1:]
    if not isinstance(state, dict) or head not in state:
        raise ValueError(
            f"`beam_invariant_state()` of {owner} must name entries of its decoding state; "
            f"received the path {tuple(path)!r}, which the state does not hold."
        )
    copy = dict(state)
    if rest:
        copy[head], value = _pop(state[head], rest, owner)
    else:
        value = copy.pop(head)
    return copy, value


def _put(state, path, value):
    head, rest = path[0], path[1:]
    copy = dict(state)
    copy[head] = _put(state[head], rest, value) if rest else value
    return copy


def reorder_except(model, state, indices, paths):
    """`model.reorder_state` of `state` with the entries at `paths` (key
    tuples) taken out first and put back as they were."""
    if not paths:
        return model.reorder_state(state, indices)
    kept = []
    for path in paths:
        path = (path,) if isinstance(path, str) else tuple(path)
        state, value = _pop(state, path, type(model).__name__)
        kept.append((path, value))
    state = model.reorder_state(state, indices)
    for path, value in kept:
        state = _put(state, path, value)
    return state


@compat.reads_0_1_0(weights="no_step_counter")
class Seq2Seq(keras.Model):
    """Base class of the encoder-decoder families (see the module docstring).

    Args:
        sos_id, eos_id, padding_id: special target token ids.
        scheduled_sampling: optional `ScheduledSampling` (or its config);
            training calls then feed the decoder its own output with
            probability p(step), step being the number of training calls
            so far (a counter the model keeps, saved with it).
        search: the default decoding strategy of `generate`: a `Search`,
            its config or a name (`get_search`); None = greedy search.
            Saved in the config only when set.
        quantization: None, or the quantization `quantize` applied, as the
            config records it ("int8", or the serialized
            `Int8QuantizationConfig` given to `quantize`): building the
            model then makes its projections int8 (what a saved quantized
            model loads into). Set by `quantize`; saved only when set.

    Call arguments:
        inputs: `(source (B, S), target_in (B, T))` int token ids.
        training: bool.

    Returns:
        logits `(B, T, target_vocab_size)`.
    """

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls, *args, **kwargs)
        # Keras wraps every layer's `quantize` per instance (its own checks,
        # then a tracker unlock); the model's `quantize` checks its arguments
        # itself and each layer's own `quantize` unlocks that layer.
        vars(obj).pop("quantize", None)
        return obj

    def __init__(
        self,
        sos_id=1,
        eos_id=2,
        padding_id=0,
        scheduled_sampling=None,
        search=None,
        quantization=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._quantization = _check_quantization(quantization, type(self).__name__)
        self.search = None if search is None else get_search(search)
        self.sos_id, self.eos_id, self.padding_id = sos_id, eos_id, padding_id
        if isinstance(scheduled_sampling, dict):
            scheduled_sampling = ScheduledSampling.from_config(scheduled_sampling)
        if scheduled_sampling is not None and not isinstance(scheduled_sampling, ScheduledSampling):
            raise ValueError(
                "`scheduled_sampling` of Seq2Seq must be a ScheduledSampling, its config or "
                f"None; received {scheduled_sampling!r}."
            )
        self.scheduled_sampling = scheduled_sampling
        # keras.random draws with a SeedGenerator owned by the model are
        # stateless-safe: under JAX's jit its state is threaded through
        # the train step like any non-trainable variable.
        self._sampling_seed = keras.random.SeedGenerator(
            getattr(scheduled_sampling, "seed", None) or 0, name="sampling_seed"
        )

    def check_special_ids(self):
        """The special ids must be distinct where it matters, and target ids:
        `<sos>` equal to `<eos>` would end every output at once, `<eos>`
        equal to padding would read every output as empty. A family calls
        this once its `target_vocab_size` is set."""
        owner = type(self).__name__
        for name in ("source_vocab_size", "target_vocab_size"):
            setattr(self, name, check_positive_int(name, getattr(self, name), owner))
        for name in ("sos_id", "eos_id", "padding_id"):
            value = check_token_id(name, getattr(self, name), self.target_vocab_size, owner)
            setattr(self, name, value)
        for first, second in (("sos_id", "eos_id"), ("eos_id", "padding_id")):
            if getattr(self, first) == getattr(self, second):
                raise ValueError(
                    f"`{first}` and `{second}` of {owner} must differ; received "
                    f"{first}={getattr(self, first)}, {second}={getattr(self, second)}."
                )

    def check_shared_vocabulary(self, share_embeddings):
        """`share_embeddings` as a bool, when the source and target
        vocabularies can be one: equal sizes (a family with a shared
        embedding table calls this after `check_special_ids`)."""
        share_embeddings = bool(share_embeddings)
        if share_embeddings and self.source_vocab_size != self.target_vocab_size:
            raise ValueError(
                f"`share_embeddings=True` of {type(self).__name__} needs one vocabulary: "
                "`source_vocab_size` equal to `target_vocab_size`; received "
                f"{self.source_vocab_size} and {self.target_vocab_size}."
            )
        return share_embeddings

    @property
    def has_attention(self):
        """Whether `decode_step`'s attention is a real alignment (a model
        without attention returns zeros; coverage penalties need one)."""
        return True

    # -- what a family implements -------------------------------------------
    def build_layers(self):
        """Build every sublayer from the token shapes (no data needed)."""
        raise NotImplementedError

    def encode(self, source, max_length=None, training=None):
        raise NotImplementedError

    def decode_step(self, tokens, state, training=None):
        """`tokens (B,)` -> `(logits (B, V), state, attention (B, S))`."""
        raise NotImplementedError

    def teacher_forced(self, source, target_in, training=None, return_attention_scores=False):
        raise NotImplementedError

    def attention_weights(self, source, target_in):
        """Attention maps for plotting: `{name: (B, [H,] T, S)}`."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------
    def build(self, input_shape=None):
        self.build_layers()
        if self.scheduled_sampling is not None:
            # Training calls so far. The optimizer's `iterations` would do on
            # TensorFlow, but a JAX train step sees only the model's own
            # variables as state (the optimizer's read as trace-time
            # constants), so the model counts for itself.
            self.sampling_step = self.add_weight(
                name="sampling_step",
                shape=(),
                dtype="int32",
                initializer="zeros",
                trainable=False,
                aggregation="only_first_replica",
            )
        if self._quantization is not None:  # a quantized model being loaded
            quantization.quantize_layers(self, _quantization_config(self._quantization))
        self.built = True

    # -- quantization ------------------------------------------------------
    def quantize(self, mode="int8", config=None, **kwargs):
        """Quantize the model in place: weight-only int8 with one scale per
        output channel, for every projection that has an int8 path.

        Quantized (an int8 kernel and a float32 scale per output channel,
        the product computed in float): this library's `MultiHead` (W^Q,
        W^K, W^V, W^O), `TokenAndPositionEmbedding` (the token table, one
        scale per token, which the Transformer's tied output projection
        reads too), `GLUConv1D`, `MultiStepAttention`, `AdditiveAttention`
        and `GeneralAttention`, and Keras's `Dense`, `EinsumDense` and
        `Embedding` (feed-forward layers, output projections, RNN
        embeddings and bridges). Left float: RNN cells, position and
        relative-position tables, the other attention scores' weights,
        biases and norms (see docs/models.md, "Quantization").

        Args:
            mode: "int8", the only mode.
            config: optional `keras.quantizers.Int8QuantizationConfig` for
                Keras's `Dense`/`EinsumDense` layers; default weight-only
                (`activation_quantizer=None`), unlike Keras's own default,
                which also quantizes their inputs. This library's layers and
                all embeddings are weight-only whatever the config.
            **kwargs: `type_check` (Keras's layer protocol) is accepted and
                ignored.

        Raises:
            ValueError: for another mode or a config of another mode, an
                unbuilt model, or a model already quantized.
        """
        owner = f"{type(self).__name__}.quantize"
        kwargs.pop("type_check", None)
        if kwargs:
            raise TypeError(
                f"{owner} got unexpected keyword arguments {sorted(kwargs)}; it takes mode "
                "and config."
            )
        quantization.check_mode(mode, config, owner)
        if not self.built:
            raise ValueError(
                f"{owner}: the model is not built, so it has no weights to quantize; build it "
                "first (call it on a batch, or model.build()), or load its weights."
            )
        if self._quantization is not None:
            raise ValueError(
                f"{owner}: the model is already quantized (quantization="
                f"{self._quantization!r}); quantize a float model once."
            )
        quantization.quantize_layers(self, config)
        self._quantization = (
            quantization.MODE if config is None else keras.saving.serialize_keras_object(config)
        )
        # Keras's Model.quantize does the same: the compiled steps held
        # the float variables.
        self.train_function = self.test_function = self.predict_function = None
        if keras.backend.backend() == "torch":  # the parameters torch tracks changed
            for layer in self._flatten_layers():
                layer._track_variables()

    @property
    def quantization_mode(self):
        """ "int8" once `quantize` ran (or a quantized model was loaded),
        else None."""
        return None if self._quantization is None else quantization.MODE

    def _int8_call(self, *args, **kwargs):
        # Keras routes a quantized layer's __call__ here.
        return self.call(*args, **kwargs)

    def compile(self, *args, search=None, **kwargs):
        """Keras's `compile`, plus `search`: the default decoding strategy of
        `generate` (a `Search`, its config or a name; None keeps the current
        one)."""
        super().compile(*args, **kwargs)
        if search is not None:
            self.search = get_search(search)

    def fit(self, x=None, y=None, *args, **kwargs):
        """Keras's `fit`; token ids given as NumPy arrays (`x = (source,
        target_in)`, `y = target_out`) are checked against the vocabularies
        first, so that an id past them is a `ValueError` naming the array
        rather than a graph execution error from a gather inside the step.
        Float arrays of ids are refused (`validation.check_integer_dtype`);
        a `y` of rank 3 (one-hot targets for a loss of your own) is not ids
        and passes. (Datasets are checked in the graph, see
        `validation.assert_at_run_time`.)"""
        owner = f"{type(self).__name__}.fit"
        arrays = []
        if isinstance(x, (tuple, list)) and len(x) == 2:
            arrays += [("x[0] (source)", x[0], self.source_vocab_size)]
            arrays += [("x[1] (target_in)", x[1], self.target_vocab_size)]
        arrays.append(("y (target_out)", y, self.target_vocab_size))
        for name, ids, vocab_size in arrays:
            if isinstance(ids, np.ndarray) and ids.ndim <= 2:
                check_integer_dtype(name, ids, owner)
                check_ids_in_range(name, ids, vocab_size, owner)
        return super().fit(x, y, *args, **kwargs)

    def compile_from_config(self, config):
        # Keras's own skips (with a warning) a model whose `compile` is
        # overridden; ours only adds `search`, which the model's config
        # carries, so a saved compiled model compiles on load as before.
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)  # its variables, to load into

    def generate(self, source, search=None, prefix=None):
        """Decode `source (B, S)` with `search` (a `Search`, config or name),
        else the default set by `compile` or the constructor, else
        `GreedySearch()` (whose `max_length` is the source's width + 1).
        Returns the search's dict (`search.py`): `tokens (B, L)` for greedy
        search and sampling, `(B, N, L)` for beam search."""
        if search is None:
            search = self.search if self.search is not None else get_search("greedy")
        elif not isinstance(search, Search):
            search = get_search(search)
        return search(self, self.check_source(source), prefix=prefix)

    def check_source(self, source):
        source = ops.convert_to_tensor(source)
        check_token_ids("source", source, type(self).__name__)
        if not self.built:
            self.build()
        return source

    def reorder_state(self, state, indices):
        """Gather every tensor of `state` along the batch axis."""
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)

    def beam_invariant_state(self):
        """The entries of the decoding state that every beam of a source
        holds equal (what the encoder made of the source, the step counter),
        as key paths into the state's dicts, e.g. `("layer_0", "cross_key")`.
        `reorder_beams` leaves them as they are. Default: none, so a family
        that does not say keeps 0.2.0's behaviour (everything gathered)."""
        return ()

    def reorder_beams(self, state, indices):
        """`reorder_state` for beam search's step, whose `indices` only move
        hypotheses among the beams of their own source: the entries named by
        `beam_invariant_state()` are the same in every row such `indices`
        pick from, so they are returned as they are, and only the rest goes
        through `reorder_state` (a model that overrides it keeps its own
        gather for those). The first expansion of a source to its beams is
        a `reorder_state` of everything."""
        return reorder_except(self, state, indices, self.beam_invariant_state())

    def call(self, inputs, training=None):
        source, target_in = inputs
        owner = type(self).__name__
        check_same_batch(owner, source=source, target_in=target_in)
        source = check_ids_in_range("source", source, self.source_vocab_size, owner)
        target_in = check_ids_in_range("target_in", target_in, self.target_vocab_size, owner)
        if training and self.scheduled_sampling is not None:
            step = ops.convert_to_tensor(self.sampling_step)
            self.sampling_step.assign(step + 1)
            return scheduled_sampling_logits(
                self,
                source,
                target_in,
                self.scheduled_sampling(step),
                self.scheduled_sampling.draw,
                self._sampling_seed,
                training=True,
            )
        return self.teacher_forced(source, target_in, training=training)

    def compute_output_shape(self, input_shape):
        source_shape, target_shape = input_shape
        return tuple(target_shape) + (self.target_vocab_size,)

    def get_config(self):
        config = {"sos_id": self.sos_id, "eos_id": self.eos_id, "padding_id": self.padding_id}
        if self.scheduled_sampling is not None:
            config["scheduled_sampling"] = self.scheduled_sampling.get_config()
        if self.search is not None:  # only when set: 0.2.0 configs stay as they were
            config["search"] = keras.saving.serialize_keras_object(self.search)
        if self._quantization is not None:  # only when set, as `search`
            config["quantization"] = self._quantization
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
