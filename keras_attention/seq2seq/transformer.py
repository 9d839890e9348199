"""The Transformer encoder-decoder behind the `Seq2Seq` interface."""

import keras
from keras import ops

from keras_attention import compat, quantization
from keras_attention.multi_head import POSITION_ENCODINGS
from keras_attention.positional import TokenAndPositionEmbedding
from keras_attention.seq2seq.base import TOKENS, Seq2Seq
from keras_attention.transformer import TransformerDecoderLayer, TransformerEncoderLayer
from keras_attention.validation import check_choice, check_positive_int

ABSOLUTE = ("sinusoidal", "learned")  # added to the embeddings
POSITIONS = ABSOLUTE + tuple(p for p in POSITION_ENCODINGS if p is not None)
CROSS = ("cross_key", "cross_value")  # a decoder layer's cache of the encoder's keys, values


@compat.reads_0_1_0(renamed={"width": "hidden_dim"}, weights="token_tables")
@keras.saving.register_keras_serializable(package="keras_attention")
@compat.keras_sliding_window
class TransformerSeq2Seq(Seq2Seq):
    """A Transformer encoder-decoder built from this library's layers.

        e = Embedding(x)·sqrt(d) + PE,  encoder: N × TransformerEncoderLayer
        g = Embedding(y)·sqrt(d) + PE,  decoder: N × TransformerDecoderLayer
        p(y_{i+1} | y_≤i, x) = softmax(W_o h_i + b_o)

    With `tie_embeddings`, `W_o` is the target embedding table itself
    (`W_o = E_target`, unscaled; Press & Wolf, 2017, as Vaswani et al.
    share it): fewer parameters, and on small data a better model. With
    `share_embeddings` as well, the source embedding reads that table too
    (`E_source = E_target`: one vocabulary for both languages; three-way
    tying, fairseq's `--share-all-embeddings`).

    `position` chooses how tokens are placed: "sinusoidal" (the paper) or
    "learned" add `PE` to the embeddings; "rope", "alibi" or "relative" add
    nothing there and apply that scheme in every self-attention, encoder
    and decoder (`MultiHead(position_encoding=...)`), while the decoder's
    cross-attention stays content-based (no position scheme: source and
    target positions are not on one axis).

    Args:
        source_vocab_size, target_vocab_size: ints.
        hidden_dim: int, the model width d (embeddings and every layer).
        num_heads, intermediate_dim, num_layers: sizes (num_layers each for
            the encoder and the decoder).
        max_length: longest target decoded (the size of the cache).
        dropout: float; norm_first: pre-norm layers (and a final norm).
        position: "sinusoidal" (default), "learned", "rope", "alibi" or
            "relative" (see above).
        num_key_value_heads: optional int dividing `num_heads`: grouped-
            query attention in every attention layer (1: multi-query).
        sliding_window: optional int `s`: each self-attention keeps
            `|i - j| < s`, Keras's meaning (see `MultiHead`; 0.2.x's
            configs, which kept `|i - j| <= s`, are read as that window).
        tie_embeddings: bool (default False): the output projection is the
            target embedding table (plus its own bias).
        share_embeddings: bool (default False): the source embedding reads
            the target embedding's token table (positions stay apart);
            needs `source_vocab_size == target_vocab_size`, one vocabulary.
        **kwargs: `Seq2Seq` arguments.

    Call arguments and returns: see `Seq2Seq`.

    Example:

    >>> model = TransformerSeq2Seq(20, 20, hidden_dim=8, num_heads=2, intermediate_dim=16)
    >>> tuple(model((np.array([[3, 4, 5]]), np.array([[1, 6]]))).shape)
    (1, 2, 20)

    References:
        Vaswani et al., "Attention Is All You Need" (2017).
    """

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=128,
        num_layers=2,
        max_length=128,
        dropout=0.0,
        norm_first=False,
        position="sinusoidal",
        num_key_value_heads=None,
        sliding_window=None,
        tie_embeddings=False,
        share_embeddings=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
        self.check_special_ids()
        self.share_embeddings = self.check_shared_vocabulary(share_embeddings)
        hidden_dim = check_positive_int("hidden_dim", hidden_dim, "TransformerSeq2Seq")
        num_heads = check_positive_int("num_heads", num_heads, "TransformerSeq2Seq")
        if hidden_dim % num_heads:
            raise ValueError(
                "`hidden_dim` of TransformerSeq2Seq must be divisible by `num_heads` (each head "
                f"reads hidden_dim / num_heads features); received hidden_dim={hidden_dim}, "
                f"num_heads={num_heads}."
            )
        self.hidden_dim, self.num_heads, self.intermediate_dim = (
            hidden_dim,
            num_heads,
            intermediate_dim,
        )
        self.num_layers, self.max_length = num_layers, max_length
        self.dropout, self.norm_first = dropout, norm_first
        check_choice("position", position, POSITIONS, "TransformerSeq2Seq")
        self.position = position
        self.num_key_value_heads, self.sliding_window = num_key_value_heads, sliding_window
        self.tie_embeddings = bool(tie_embeddings)
        self._make_layers()

    def _make_layers(self):
        """The sublayers, from the checked options: the two embeddings (the
        source one reading the target's table with `share_embeddings`), the
        encoder and decoder stacks, the final norm (pre-norm only) and the
        output projection (none when tied)."""
        absolute = self.position in ABSOLUTE
        variants = {
            "num_key_value_heads": self.num_key_value_heads,
            "position_encoding": None if absolute else self.position,
            "sliding_window": self.sliding_window,
        }

        def embedding(vocab_size, name):
            # Vaswani et al., Sec. 3.4: embeddings scaled by sqrt(d).
            return TokenAndPositionEmbedding(
                vocab_size,
                self.hidden_dim,
                self.max_length,
                position=self.position if absolute else None,
                scale_embeddings=True,
                dropout=self.dropout,
                padding_id=self.padding_id,
                name=name,
            )

        self.source_embedding = embedding(self.source_vocab_size, "source_embedding")
        self.target_embedding = embedding(self.target_vocab_size, "target_embedding")
        if self.share_embeddings:
            self.source_embedding.share_token_table(self.target_embedding)
        sizes = (self.num_heads, self.intermediate_dim)
        options = dict(dropout=self.dropout, norm_first=self.norm_first, **variants)
        self.encoder_layers = [
            TransformerEncoderLayer(*sizes, name=f"encoder_{i}", **options)
            for i in range(self.num_layers)
        ]
        self.decoder_layers = [
            TransformerDecoderLayer(*sizes, name=f"decoder_{i}", **options)
            for i in range(self.num_layers)
        ]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5) if self.norm_first else None
        # Tied (Press & Wolf, 2017; Vaswani et al., Sec. 3.4): the logits are
        # y·E_targetᵀ + b with the target embedding table E_target, unscaled.
        self.output_projection = (
            None
            if self.tie_embeddings
            else keras.layers.Dense(self.target_vocab_size, name="output_projection")
        )

    def build_layers(self):
        sequence = (None, None, self.hidden_dim)
        self.source_embedding.build(TOKENS)
        self.target_embedding.build(TOKENS)
        for layer in self.encoder_layers:
            layer.build(sequence)
        for layer in self.decoder_layers:
            layer.build(sequence, sequence)
        if self.final_norm is not None:
            self.final_norm.build(sequence)
        if self.tie_embeddings:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.target_vocab_size,), initializer="zeros"
            )
        else:
            self.output_projection.build(sequence)

    def _encode_memory(self, source, training=None):
        source = self.check_source(source)
        mask = ops.not_equal(source, self.padding_id)
        x = self.source_embedding(source, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=mask, training=training)
        return x, mask

    def _output(self, x):
        return self._project(self._features(x))

    def _features(self, x):
        return x if self.final_norm is None else self.final_norm(x)

    def _project(self, x):
        if self.tie_embeddings:
            logits = quantization.tied_logits(self, self.target_embedding, x)
            return logits + ops.cast(self.output_bias, x.dtype)
        return self.output_projection(x)

    def encode(self, source, max_length=None, training=None):
        max_length = max_length or self.max_length
        if max_length > self.max_length:
            raise ValueError(
                f"`max_length` {max_length} exceeds TransformerSeq2Seq's max_length "
                f"{self.max_length} (the size of its decoding cache); decode fewer tokens or "
                "build a larger model."
            )
        memory, mask = self._encode_memory(source, training=training)
        batch = ops.shape(memory)[0]
        state = {
            f"layer_{i}": layer.init_cache(batch, max_length, memory)
            for i, layer in enumerate(self.decoder_layers)
        }
        state.update(source_mask=mask, step=ops.zeros((batch,), "int32"))
        return state

    def loop_kernels(self, kernel):
        """The tied output projection's table, transposed once before a
        search's loop (`quantization.dequantized` calls this)."""
        if not self.tie_embeddings:
            return {}
        return quantization.tied_loop_kernels(self.target_embedding, self.compute_dtype)

    def beam_invariant_state(self):
        """The source mask, the step counter and every layer's cross-attention
        keys and values (projections of the encoder's output)."""
        cross = [(f"layer_{i}", name) for i in range(self.num_layers) for name in CROSS]
        return [("source_mask",), ("step",)] + cross

    def decode_step(self, tokens, state, training=None):
        features, state, weights = self.decode_features(tokens, state, training=training)
        return self._project(features), state, weights

    def decode_features(self, tokens, state, training=None):
        """`decode_step` up to the output projection: `(features (B, D),
        state, attention)`, the logits being `output_columns`' (or the
        whole projection's) of `features`."""
        index = state["step"][0]
        x = self.target_embedding(
            ops.cast(tokens, "int32")[:, None], start_index=index, training=training
        )
        new_state = dict(state)
        for i, layer in enumerate(self.decoder_layers):
            x, cross, new_state[f"layer_{i}"] = layer.step(
                x,
                state[f"layer_{i}"],
                index,
                encoder_padding_mask=state["source_mask"],
                training=training,
            )
        new_state["step"] = state["step"] + 1
        weights = ops.mean(cross[:, :, 0], axis=1)  # last layer, mean over heads: (B, S)
        return self._features(x)[:, 0], new_state, weights

    def output_columns(self, columns):
        """The output projection onto the target ids `columns (K,)` only,
        `features (B, D) -> logits (B, K)`, its weights gathered once
        (`quantization.column_projection`): a vocabulary shortlist."""
        if self.tie_embeddings:
            return quantization.column_projection(
                columns,
                self.compute_dtype,
                table_layer=self.target_embedding,
                bias=self.output_bias,
            )
        return quantization.column_projection(
            columns, self.compute_dtype, dense=self.output_projection
        )

    @compat.renamed_arguments(
        "TransformerSeq2Seq.teacher_forced", return_attention="return_attention_scores"
    )
    def teacher_forced(self, source, target_in, training=None, return_attention_scores=False):
        memory, mask = self._encode_memory(source, training=training)
        y = self.target_embedding(target_in, training=training)
        scores = {}
        for i, layer in enumerate(self.decoder_layers):
            y, layer_scores = layer(
                y,
                memory,
                encoder_padding_mask=mask,
                return_attention_scores=True,
                training=training,
            )
            scores[f"layer {i + 1}"] = layer_scores["cross_attention"]
        logits = self._output(y)
        return (logits, scores) if return_attention_scores else logits

    def attention_weights(self, source, target_in):
        return self.teacher_forced(source, target_in, return_attention_scores=True)[1]

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocab_size": self.source_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "num_layers": self.num_layers,
            "max_length": self.max_length,
            "dropout": self.dropout,
            "norm_first": self.norm_first,
            "position": self.position,
            "num_key_value_heads": self.num_key_value_heads,
            "sliding_window": self.sliding_window,
            "tie_embeddings": self.tie_embeddings,
            "share_embeddings": self.share_embeddings,
        }
