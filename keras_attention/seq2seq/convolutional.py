"""The convolutional encoder-decoder (ConvS2S) behind the `Seq2Seq`
interface."""

import keras
from keras import ops

from keras_attention import compat
from keras_attention.convs2s import PRESETS, ConvS2SDecoder, ConvS2SEncoder
from keras_attention.seq2seq.base import TOKENS, Seq2Seq


@keras.saving.register_keras_serializable(package="keras_attention")
class ConvS2SSeq2Seq(Seq2Seq):
    """ConvS2S (Gehring et al., 2017): gated convolutions in both stacks and
    one multi-step attention per decoder layer.

        z, z + e = ConvS2SEncoder(x)
        p(y_{i+1} | y_≤i, x) = ConvS2SDecoder(y_≤i, z, z + e)

    Args:
        source_vocab_size, target_vocab_size: ints.
        embed_dim: int, embedding width E (also the attention width).
        encoder_convolutions, decoder_convolutions: optional lists of
            (width, kernel_size) per layer, for stacks of mixed widths;
            default `num_layers` layers of `(hidden_dim, kernel_size)`.
        max_length: int, learned positions (source and target).
        dropout: float.
        hidden_dim, num_layers, kernel_size: the default stacks.
        fairseq_compatible: bool, follow fairseq's `fconv` equations exactly
            (see `ConvS2SDecoder`), e.g. to port fconv weights; default False.
        output_embed_dim: with `fairseq_compatible`, the width of the
            decoder's hidden output projection (fairseq's
            `decoder_out_embed_dim`); default `embed_dim`.
        tie_embeddings: bool (default False): the output projection is the
            target token table, `W_o = W_yᵀ` (see `ConvS2SDecoder`).
        share_embeddings: bool (default False): the encoder reads the
            decoder's token table, `W_x = W_y` (one vocabulary for both
            languages: `source_vocab_size == target_vocab_size`); each
            stack keeps its learned positions. With `tie_embeddings`, one
            table is all three (three-way tying, Press & Wolf, 2017).
        **kwargs: `Seq2Seq` arguments.

    Call arguments and returns: see `Seq2Seq`.

    Example:

    >>> model = ConvS2SSeq2Seq(20, 20, embed_dim=8, hidden_dim=8, num_layers=2)
    >>> tuple(model((np.array([[3, 4, 5]]), np.array([[1, 6]]))).shape)
    (1, 2, 20)

    References:
        Gehring et al., "Convolutional Sequence to Sequence Learning" (2017).
    """

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size,
        embed_dim=64,
        encoder_convolutions=None,
        decoder_convolutions=None,
        max_length=128,
        dropout=0.0,
        hidden_dim=64,
        num_layers=3,
        kernel_size=3,
        fairseq_compatible=False,
        output_embed_dim=None,
        tie_embeddings=False,
        share_embeddings=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.fairseq_compatible = bool(fairseq_compatible)
        self.output_embed_dim = output_embed_dim
        self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
        self.check_special_ids()
        self.share_embeddings = self.check_shared_vocabulary(share_embeddings)
        self.embed_dim, self.max_length, self.dropout = embed_dim, max_length, dropout
        self.hidden_dim, self.num_layers, self.kernel_size = hidden_dim, num_layers, kernel_size
        default = ((hidden_dim, kernel_size),) * num_layers
        self.encoder = ConvS2SEncoder(
            source_vocab_size,
            embed_dim,
            encoder_convolutions or default,
            max_length,
            dropout,
            padding_id=self.padding_id,
            fairseq_compatible=self.fairseq_compatible,
            name="encoder",
        )
        self.decoder = ConvS2SDecoder(
            target_vocab_size,
            embed_dim,
            decoder_convolutions or default,
            max_length,
            dropout,
            padding_id=self.padding_id,
            fairseq_compatible=self.fairseq_compatible,
            output_embed_dim=output_embed_dim,
            tie_embeddings=tie_embeddings,
            name="decoder",
        )
        self.tie_embeddings = self.decoder.tie_embeddings
        if self.share_embeddings:
            self.encoder.share_token_table(self.decoder)

    @classmethod
    def from_preset(cls, preset, source_vocab_size, target_vocab_size, **kwargs):
        """A model with the stacks of a named architecture (fairseq's
        `fconv_iwslt_de_en`, `fconv_wmt_en_ro`, or `tiny`); `kwargs`
        override the rest."""
        if preset not in PRESETS:
            raise ValueError(
                f"ConvS2SSeq2Seq.from_preset: `preset` must be one of {sorted(PRESETS)}; "
                f"received {preset!r}."
            )
        sizes = PRESETS[preset]
        return cls(
            source_vocab_size,
            target_vocab_size,
            embed_dim=sizes["embed_dim"],
            encoder_convolutions=sizes["encoder"],
            decoder_convolutions=sizes["decoder"],
            **kwargs,
        )

    def build_layers(self):
        memory = (None, None, self.embed_dim)
        if self.share_embeddings:  # the table is the decoder's: it comes first
            self.decoder.build(TOKENS, memory, memory)
        self.encoder.build(TOKENS)
        if not self.decoder.built:
            self.decoder.build(TOKENS, memory, memory)

    def encode(self, source, max_length=None, training=None):
        source = self.check_source(source)
        if max_length is not None and max_length > self.max_length:
            raise ValueError(
                f"`max_length` {max_length} exceeds the {self.max_length} learned target "
                "positions of ConvS2SSeq2Seq; decode fewer tokens or build the model with a "
                "larger max_length."
            )
        keys, values = self.encoder(source, training=training)
        state = self.decoder.init_cache(keys, values, self.encoder.source_mask(source))
        state["step"] = ops.zeros((ops.shape(source)[0],), "int32")
        return state

    def beam_invariant_state(self):
        """The encoder's outputs z and z + e, the source mask and the step
        counter (the convolution buffers are each beam's own)."""
        return [("encoder_keys",), ("encoder_values",), ("source_mask",), ("step",)]

    def decode_step(self, tokens, state, training=None):
        return self._step(tokens, state, training, project=True)

    def decode_features(self, tokens, state, training=None):
        """`decode_step` up to the output projection: `(features (B, D),
        state, attention)` (see `output_columns`)."""
        return self._step(tokens, state, training, project=False)

    def output_columns(self, columns):
        """The output projection onto the target ids `columns (K,)` only
        (`ConvS2SDecoder.output_columns`): a vocabulary shortlist."""
        return self.decoder.output_columns(columns)

    def _step(self, tokens, state, training, project):
        cache = {k: v for k, v in state.items() if k != "step"}
        outputs, scores, cache = self.decoder.step(
            ops.cast(tokens, "int32"), cache, state["step"][0], training=training, project=project
        )
        weights = ops.mean(ops.stack(scores, axis=0), axis=0)  # mean over layers, (B, S)
        return outputs, dict(cache, step=state["step"] + 1), weights

    @compat.renamed_arguments(
        "ConvS2SSeq2Seq.teacher_forced", return_attention="return_attention_scores"
    )
    def teacher_forced(self, source, target_in, training=None, return_attention_scores=False):
        source = self.check_source(source)
        keys, values = self.encoder(source, training=training)
        return self.decoder(
            target_in,
            keys,
            values,
            source_mask=self.encoder.source_mask(source),
            return_attention_scores=return_attention_scores,
            training=training,
        )

    def attention_weights(self, source, target_in):
        _, scores = self.teacher_forced(source, target_in, return_attention_scores=True)
        return {f"layer {index + 1}": weights for index, weights in enumerate(scores)}

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocab_size": self.source_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "embed_dim": self.embed_dim,
            "encoder_convolutions": [list(c) for c in self.encoder.convolutions],
            "decoder_convolutions": [list(c) for c in self.decoder.convolutions],
            "max_length": self.max_length,
            "dropout": self.dropout,
            "hidden_dim": self.hidden_dim,
            "num_layers": self.num_layers,
            "kernel_size": self.kernel_size,
            "fairseq_compatible": self.fairseq_compatible,
            "output_embed_dim": self.output_embed_dim,
            "tie_embeddings": self.tie_embeddings,
            "share_embeddings": self.share_embeddings,
        }
