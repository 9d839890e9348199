"""One model interface for the recurrent, convolutional and Transformer
encoder-decoders, plus the training regimes (masked cross-entropy, label
smoothing, scheduled sampling).

Every family implements:

    logits = model((source, target_in))                  teacher forcing, (B, T, V)
    state = model.encode(source, max_length)             dict of batch-major tensors
    logits, state = model.decode_step(tokens, state)     one position, (B, V)
    state = model.reorder_state(state, indices)          gather along the batch
    weights = model.attention_weights(source, target_in) {name: (B, [H,] T, S)}

`state["attention"]` holds the source attention of the latest step (B, S),
so generation can return the alignment of the hypotheses it keeps.
"""

import math

import keras
from keras import ops

from keras_attention.convs2s import ConvS2SDecoder, ConvS2SEncoder
from keras_attention.masking import write_at
from keras_attention.positional import PositionalEmbedding
from keras_attention.rnn import AttentionDecoder, RecurrentEncoder
from keras_attention.transformer import TransformerDecoderLayer, TransformerEncoderLayer
from keras_attention.validation import check_choice, check_positive_int, check_rate

register = keras.saving.register_keras_serializable(package="keras_attention")


def check_source(source, owner="Seq2Seq"):
    shape = tuple(source.shape)
    if len(shape) != 2:
        raise ValueError(f"`source` of {owner} must be int token ids of shape (B, S); received shape {shape}.")
    if shape[1] == 0:
        raise ValueError(
            f"`source` of {owner} is empty (shape {shape}): it needs at least one token per row "
            "(pad short rows with the padding id)."
        )


@register
class MaskedCrossEntropy(keras.losses.Loss):
    """Token cross-entropy that ignores padding, with optional label smoothing.

        L = -(1/N) Σ_{t: y_t ≠ pad} Σ_v q_t(v) log p_t(v)
        q_t = (1 - ε) onehot(y_t) + ε / V

    averaged over the N non-padding target tokens of the batch.
    """

    def __init__(self, padding_id=0, label_smoothing=0.0, name="masked_cross_entropy", **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", **kwargs)
        check_rate("label_smoothing", label_smoothing, "MaskedCrossEntropy")
        self.padding_id = padding_id
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)  # (B, T, V)
        vocab = ops.shape(y_pred)[-1]
        target = ops.one_hot(y_true, vocab)
        if self.label_smoothing:
            target = target * (1.0 - self.label_smoothing) + self.label_smoothing / ops.cast(vocab, "float32")
        token_loss = -ops.sum(target * log_probs, axis=-1)  # (B, T)
        mask = ops.cast(ops.not_equal(y_true, self.padding_id), "float32")
        return ops.sum(token_loss * mask) / ops.maximum(ops.sum(mask), 1.0)

    def get_config(self):
        return {"name": self.name, "padding_id": self.padding_id, "label_smoothing": self.label_smoothing}


@register
class ScheduledSampling:
    """Probability p(step) of feeding the decoder its own output (Bengio et
    al., 2015) instead of the ground truth during training.

    - "constant": p = `probability`.
    - "linear": p rises from `start` to `end` over `steps` steps.
    - "inverse_sigmoid": p = 1 - k / (k + exp(step / k)), rising from about 0
      towards 1 (the paper's ε_i = k / (k + exp(i/k)) is 1 - p).

    `draw` is "sample" (draw from the softmax, as the paper does) or
    "argmax".
    """

    def __init__(self, schedule="constant", probability=0.25, start=0.0, end=0.5, steps=10000, k=1000.0,
                 draw="sample", seed=None):
        check_choice("schedule", schedule, ("constant", "linear", "inverse_sigmoid"), "ScheduledSampling")
        check_choice("draw", draw, ("sample", "argmax"), "ScheduledSampling")
        for name, value in (("probability", probability), ("start", start), ("end", end)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"`{name}` of ScheduledSampling must be in [0, 1]; received {name}={value!r}.")
        check_positive_int("steps", steps, "ScheduledSampling")
        if k <= 0:
            raise ValueError(f"`k` of ScheduledSampling must be positive; received k={k!r}.")
        self.schedule, self.probability, self.start, self.end = schedule, probability, start, end
        self.steps, self.k, self.draw, self.seed = steps, k, draw, seed

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if self.schedule == "constant":
            return ops.convert_to_tensor(self.probability, "float32")
        if self.schedule == "linear":
            fraction = ops.minimum(step / float(self.steps), 1.0)
            return self.start + (self.end - self.start) * fraction
        return 1.0 - self.k / (self.k + ops.exp(ops.minimum(step / self.k, 80.0)))

    def get_config(self):
        return {"schedule": self.schedule, "probability": self.probability, "start": self.start, "end": self.end,
                "steps": self.steps, "k": self.k, "draw": self.draw, "seed": self.seed}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class Seq2Seq(keras.Model):
    """Base class of the encoder-decoder families (see the module docstring).

    Args:
        sos_id, eos_id, padding_id: special target token ids.
        scheduled_sampling: optional `ScheduledSampling`; `fit` then feeds
            the decoder its own output with probability p(step).
    """

    def __init__(self, sos_id=1, eos_id=2, padding_id=0, scheduled_sampling=None, **kwargs):
        super().__init__(**kwargs)
        self.sos_id, self.eos_id, self.padding_id = sos_id, eos_id, padding_id
        self.scheduled_sampling = scheduled_sampling
        self._sampling_seed = keras.random.SeedGenerator(
            getattr(scheduled_sampling, "seed", None) or 0
        )

    # -- the interface -------------------------------------------------------
    def encode(self, source, max_length=None, training=None):
        raise NotImplementedError

    def decode_step(self, tokens, state, training=None):
        raise NotImplementedError

    def reorder_state(self, state, indices):
        """Gather every tensor of `state` along the batch axis."""
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)

    def attention_weights(self, source, target_in):
        """Attention maps for plotting: `{name: (B, [H,] T, S)}`."""
        raise NotImplementedError

    def call(self, inputs, training=None):
        source, target_in = inputs
        return self.teacher_forced(source, target_in, training=training)

    def teacher_forced(self, source, target_in, training=None):
        raise NotImplementedError

    # -- scheduled sampling ----------------------------------------------------
    def scheduled_sampling_logits(self, source, target_in, probability, draw="sample", training=None):
        """Decode step by step; at step t+1 feed, with probability p, the
        token drawn from the model's own output at step t instead of the
        ground truth `target_in[:, t+1]`. p = 0 is teacher forcing, p = 1 is
        free running. Returns logits `(B, T, V)`."""
        source = ops.convert_to_tensor(source)
        target_in = ops.cast(ops.convert_to_tensor(target_in), "int32")
        static_length = target_in.shape[1]
        state = self.encode(source, max_length=static_length, training=training)
        batch = ops.shape(target_in)[0]
        probability = ops.cast(probability, "float32")

        def next_tokens(logits, t):
            if draw == "argmax":
                drawn = ops.argmax(logits, axis=-1)
            else:
                drawn = keras.random.categorical(ops.cast(logits, "float32"), 1, seed=self._sampling_seed)[:, 0]
            use_model = keras.random.uniform((batch,), seed=self._sampling_seed) < probability
            return ops.where(use_model, ops.cast(drawn, "int32"), ops.take(target_in, t, axis=1))

        logits, state = self.decode_step(target_in[:, 0], state, training=training)
        if static_length is not None:
            # A known length (the usual padded batch): unroll, so each step is
            # a plain op in the graph.
            outputs = [logits]
            for t in range(1, static_length):
                logits, state = self.decode_step(next_tokens(logits, t), state, training=training)
                outputs.append(logits)
            return ops.stack(outputs, axis=1)

        # An unknown length (tf.data with padded_batch): a while_loop that
        # writes each step with `write_at`, which keeps gradients flowing.
        length = ops.shape(target_in)[1]
        outputs = write_at(ops.zeros((batch, length, ops.shape(logits)[-1]), logits.dtype),
                           logits[:, None], 0, axis=1)

        def body(t, logits, state, outputs):
            logits, state = self.decode_step(next_tokens(logits, t), state, training=training)
            return t + 1, logits, state, write_at(outputs, logits[:, None], t, axis=1)

        _, _, _, outputs = ops.while_loop(lambda t, *_: t < length, body, (1, logits, state, outputs))
        return outputs

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras 3.15's TF trainer first averages the first batch across
        # replicas with `strategy.reduce`, which fails on nested integer
        # batches under MultiWorkerMirroredStrategy, and only then checks
        # whether anything is unbuilt. A model whose weights and optimizer
        # were built before `fit` has nothing to build: skip straight past.
        if self.built and self.optimizer is not None and self.optimizer.built:
            return
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    @staticmethod
    def _for_multi_worker_reduce(logs):
        """Keras 3.15's `fit` under MultiWorkerMirroredStrategy averages each
        step's metrics with `strategy.reduce("MEAN", v, axis=0)`, which fails
        on scalars ("Invalid reduction dimension 0 for input with 0
        dimensions", tensorflow#72388). Shape (1,) metrics reduce to the
        same scalar mean."""
        import tensorflow as tf  # train/test steps are backend-specific in Keras 3

        strategy = tf.distribute.get_strategy()
        if strategy.extended._in_multi_worker_mode():
            return {name: tf.reshape(value, (1,)) for name, value in logs.items()}
        return logs

    def test_step(self, data):
        return self._for_multi_worker_reduce(super().test_step(data))

    def train_step(self, data):
        if self.scheduled_sampling is None:
            return self._for_multi_worker_reduce(super().train_step(data))
        import tensorflow as tf  # train_step is backend-specific in Keras 3

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        probability = self.scheduled_sampling(self.optimizer.iterations)
        with tf.GradientTape() as tape:
            y_pred = self.scheduled_sampling_logits(x[0], x[1], probability, self.scheduled_sampling.draw,
                                                    training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        return self._for_multi_worker_reduce(self.compute_metrics(x, y, y_pred, sample_weight))

    def get_config(self):
        config = {"sos_id": self.sos_id, "eos_id": self.eos_id, "padding_id": self.padding_id}
        if self.scheduled_sampling is not None:
            config["scheduled_sampling"] = self.scheduled_sampling.get_config()
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("scheduled_sampling"):
            config["scheduled_sampling"] = ScheduledSampling.from_config(config["scheduled_sampling"])
        return cls(**config)


@register
class RecurrentSeq2Seq(Seq2Seq):
    """RNN encoder-decoder with attention (Bahdanau or Luong), or without
    (the bottleneck baseline: `attention=None`).

    Args:
        source_vocab_size, target_vocab_size: ints.
        embed_dim, units: ints.
        attention: "dot", "general", "additive", "concat", "local",
            "multihead" or None.
        style: "bahdanau" or "luong"; input_feeding, context_input: see
            `AttentionDecoder`.
        encoder_layers, decoder_layers, cell, bidirectional, reverse_source,
        dropout: see `RecurrentEncoder`.
    """

    ATTENTION = ("dot", "general", "additive", "concat", "local", "multihead")

    def __init__(self, source_vocab_size, target_vocab_size, embed_dim=64, units=64, attention="general",
                 style="luong", input_feeding=True, context_input=False, encoder_layers=1, decoder_layers=1,
                 cell="lstm", bidirectional=False, reverse_source=False, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if attention is not None:
            check_choice("attention", attention, self.ATTENTION, "RecurrentSeq2Seq")
        self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
        self.embed_dim, self.units, self.attention_name = embed_dim, units, attention
        self.style, self.input_feeding, self.context_input = style, input_feeding, context_input
        self.encoder_layers, self.decoder_layers, self.cell = encoder_layers, decoder_layers, cell
        self.bidirectional, self.reverse_source, self.dropout = bidirectional, reverse_source, dropout
        self.encoder = RecurrentEncoder(source_vocab_size, embed_dim, units, encoder_layers, cell, bidirectional,
                                        reverse_source, dropout, padding_id=self.padding_id, name="encoder")
        self.decoder = AttentionDecoder(target_vocab_size, embed_dim, units, self._make_attention(), style,
                                        input_feeding, context_input, decoder_layers, cell, dropout,
                                        name="decoder")

    def _make_attention(self):
        from keras_attention import (AdditiveAttention, ConcatAttention, DotProductAttention, GeneralAttention,
                                     LocalAttention, MultiHead)

        memory = self.units * (2 if self.bidirectional else 1)
        return {
            None: lambda: None,
            "dot": lambda: DotProductAttention() if memory == self.units else GeneralAttention(),
            "general": GeneralAttention,
            "additive": lambda: AdditiveAttention(self.units),
            "concat": lambda: ConcatAttention((self.units,)),
            "local": lambda: LocalAttention(window=4, mode="predictive", score="general"),
            "multihead": lambda: MultiHead(num_heads=4, key_dim=max(1, self.units // 4), output_dim=memory),
        }[self.attention_name]()

    def encode(self, source, max_length=None, training=None):
        source = ops.convert_to_tensor(source)
        check_source(source, "RecurrentSeq2Seq")
        memory, final_state = self.encoder(source, training=training)
        return self.decoder.initial_state(memory, final_state, self.encoder.source_mask(source))

    def decode_step(self, tokens, state, training=None):
        return self.decoder.step(tokens, state, training=training)

    def teacher_forced(self, source, target_in, training=None, return_attention=False):
        state = self.encode(source, training=training)
        logits, weights = self.decoder(target_in, state, training=training)
        return (logits, weights) if return_attention else logits

    def attention_weights(self, source, target_in):
        if self.attention_name is None:
            return {}  # the bottleneck baseline has no alignment
        return {"attention": self.teacher_forced(source, target_in, return_attention=True)[1]}

    def get_config(self):
        return {**super().get_config(), "source_vocab_size": self.source_vocab_size,
                "target_vocab_size": self.target_vocab_size, "embed_dim": self.embed_dim, "units": self.units,
                "attention": self.attention_name, "style": self.style, "input_feeding": self.input_feeding,
                "context_input": self.context_input, "encoder_layers": self.encoder_layers,
                "decoder_layers": self.decoder_layers, "cell": self.cell, "bidirectional": self.bidirectional,
                "reverse_source": self.reverse_source, "dropout": self.dropout}


@register
class ConvS2SSeq2Seq(Seq2Seq):
    """The ConvS2S encoder-decoder behind the `Seq2Seq` interface.

    Args:
        source_vocab_size, target_vocab_size, embed_dim: ints.
        encoder_convolutions, decoder_convolutions: (width, kernel) lists.
        max_length: learned positions (source and target).
        dropout: float.
    """

    def __init__(self, source_vocab_size, target_vocab_size, embed_dim=64, encoder_convolutions=((64, 3),) * 3,
                 decoder_convolutions=((64, 3),) * 3, max_length=128, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
        self.embed_dim, self.max_length, self.dropout = embed_dim, max_length, dropout
        self.encoder = ConvS2SEncoder(source_vocab_size, embed_dim, encoder_convolutions, max_length, dropout,
                                      padding_id=self.padding_id, name="encoder")
        self.decoder = ConvS2SDecoder(target_vocab_size, embed_dim, decoder_convolutions, max_length, dropout,
                                      padding_id=self.padding_id, name="decoder")

    def encode(self, source, max_length=None, training=None):
        source = ops.convert_to_tensor(source)
        check_source(source, "ConvS2SSeq2Seq")
        if max_length is not None and max_length > self.max_length:
            raise ValueError(
                f"`max_length` {max_length} exceeds the {self.max_length} learned target positions of "
                "ConvS2SSeq2Seq; decode fewer tokens or build the model with a larger max_length."
            )
        keys, values = self.encoder(source, training=training)
        state = self.decoder.init_cache(keys, values, self.encoder.source_mask(source))
        state["step"] = ops.zeros((ops.shape(source)[0],), "int32")
        state["attention"] = ops.zeros(ops.shape(source), self.compute_dtype)
        return state

    def decode_step(self, tokens, state, training=None):
        cache = {k: v for k, v in state.items() if k not in ("step", "attention")}
        logits, scores, cache = self.decoder.step(ops.cast(tokens, "int32"), cache, state["step"][0],
                                                  training=training)
        weights = ops.mean(ops.stack(scores, axis=0), axis=0)  # mean over layers, (B, S)
        return logits, dict(cache, step=state["step"] + 1, attention=ops.cast(weights, state["attention"].dtype))

    def teacher_forced(self, source, target_in, training=None, return_attention=False):
        source = ops.convert_to_tensor(source)
        check_source(source, "ConvS2SSeq2Seq")
        keys, values = self.encoder(source, training=training)
        return self.decoder(target_in, keys, values, source_mask=self.encoder.source_mask(source),
                            return_attention_scores=return_attention, training=training)

    def attention_weights(self, source, target_in):
        _, scores = self.teacher_forced(source, target_in, return_attention=True)
        return {f"layer {index + 1}": weights for index, weights in enumerate(scores)}

    def get_config(self):
        return {**super().get_config(), "source_vocab_size": self.source_vocab_size,
                "target_vocab_size": self.target_vocab_size, "embed_dim": self.embed_dim,
                "encoder_convolutions": [list(c) for c in self.encoder.convolutions],
                "decoder_convolutions": [list(c) for c in self.decoder.convolutions],
                "max_length": self.max_length, "dropout": self.dropout}


@register
class TransformerSeq2Seq(Seq2Seq):
    """A Transformer encoder-decoder built from this library's layers.

        e = Embedding(x)·sqrt(d) + PE,  encoder: N × TransformerEncoderLayer
        g = Embedding(y)·sqrt(d) + PE,  decoder: N × TransformerDecoderLayer
        p(y_{i+1} | y_≤i, x) = softmax(W_o h_i + b_o)

    Args:
        source_vocab_size, target_vocab_size: ints.
        width, num_heads, intermediate_dim, num_layers: sizes.
        max_length: longest target decoded (cache size) and learned limit.
        dropout: float; norm_first: pre-norm layers.
    """

    def __init__(self, source_vocab_size, target_vocab_size, width=64, num_heads=4, intermediate_dim=128,
                 num_layers=2, max_length=128, dropout=0.0, norm_first=False, **kwargs):
        super().__init__(**kwargs)
        self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
        self.width, self.num_heads, self.intermediate_dim = width, num_heads, intermediate_dim
        self.num_layers, self.max_length, self.dropout, self.norm_first = num_layers, max_length, dropout, norm_first
        self.source_embedding = keras.layers.Embedding(source_vocab_size, width, name="source_embedding")
        self.target_embedding = keras.layers.Embedding(target_vocab_size, width, name="target_embedding")
        self.positions = PositionalEmbedding(max_length, name="positions")
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.encoder_layers = [TransformerEncoderLayer(num_heads, intermediate_dim, dropout=dropout,
                                                       norm_first=norm_first, name=f"encoder_{i}")
                               for i in range(num_layers)]
        self.decoder_layers = [TransformerDecoderLayer(num_heads, intermediate_dim, dropout=dropout,
                                                       norm_first=norm_first, name=f"decoder_{i}")
                               for i in range(num_layers)]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5) if norm_first else None
        self.output_projection = keras.layers.Dense(target_vocab_size, name="output_projection")

    def _embed(self, embedding, tokens, start_index=0, training=None):
        x = embedding(tokens) * ops.cast(math.sqrt(self.width), self.compute_dtype)  # Vaswani et al. 3.4
        return self.embedding_dropout(self.positions(x, start_index=start_index), training=training)

    def _encode_memory(self, source, training=None):
        source = ops.convert_to_tensor(source)
        check_source(source, "TransformerSeq2Seq")
        mask = ops.not_equal(source, self.padding_id)
        x = self._embed(self.source_embedding, source, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=mask, training=training)
        return x, mask

    def _output(self, x):
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.output_projection(x)

    def encode(self, source, max_length=None, training=None):
        max_length = max_length or self.max_length
        if max_length > self.max_length:
            raise ValueError(
                f"`max_length` {max_length} exceeds TransformerSeq2Seq's max_length {self.max_length} "
                "(the size of its decoding cache); decode fewer tokens or build a larger model."
            )
        memory, mask = self._encode_memory(source, training=training)
        batch = ops.shape(memory)[0]
        if not self.decoder_layers[0].built:
            self.teacher_forced(source, ops.ones((batch, 2), "int32"))  # builds the decoder
        state = {f"layer_{i}": layer.init_cache(batch, max_length, memory)
                 for i, layer in enumerate(self.decoder_layers)}
        state.update(source_mask=mask, step=ops.zeros((batch,), "int32"),
                     attention=ops.zeros(ops.shape(mask), self.compute_dtype))
        return state

    def decode_step(self, tokens, state, training=None):
        index = state["step"][0]
        x = self._embed(self.target_embedding, ops.cast(tokens, "int32")[:, None], start_index=index,
                        training=training)
        new_state = dict(state)
        for i, layer in enumerate(self.decoder_layers):
            x, cross, new_state[f"layer_{i}"] = layer.step(x, state[f"layer_{i}"], index,
                                                           encoder_padding_mask=state["source_mask"],
                                                           training=training)
        new_state["step"] = state["step"] + 1
        new_state["attention"] = ops.cast(ops.mean(cross[:, :, 0], axis=1), state["attention"].dtype)
        return self._output(x)[:, 0], new_state

    def teacher_forced(self, source, target_in, training=None, return_attention=False):
        memory, mask = self._encode_memory(source, training=training)
        y = self._embed(self.target_embedding, target_in, training=training)
        scores = {}
        for i, layer in enumerate(self.decoder_layers):
            y, layer_scores = layer(y, memory, encoder_padding_mask=mask, return_attention_scores=True,
                                    training=training)
            scores[f"layer {i + 1}"] = layer_scores["cross_attention"]
        logits = self._output(y)
        return (logits, scores) if return_attention else logits

    def attention_weights(self, source, target_in):
        return self.teacher_forced(source, target_in, return_attention=True)[1]

    def get_config(self):
        return {**super().get_config(), "source_vocab_size": self.source_vocab_size,
                "target_vocab_size": self.target_vocab_size, "width": self.width, "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim, "num_layers": self.num_layers,
                "max_length": self.max_length, "dropout": self.dropout, "norm_first": self.norm_first}
