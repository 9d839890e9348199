"""The recurrent encoder-decoder: an LSTM/GRU encoder and an attention
decoder (Bahdanau or Luong), or no attention (the bottleneck baseline)."""

import keras
from keras import ops

from keras_attention import compat, registry
from keras_attention.rnn import AttentionDecoder
from keras_attention.rnn_encoder import RecurrentEncoder
from keras_attention.seq2seq.base import TOKENS, Seq2Seq


@compat.reads_0_1_0(
    renamed={
        "units": "hidden_dim",
        "encoder_layers": "num_layers",
        "decoder_layers": "num_decoder_layers",
    }
)
@keras.saving.register_keras_serializable(package="keras_attention")
class RecurrentSeq2Seq(Seq2Seq):
    """RNN encoder-decoder with attention, or without (the bottleneck
    baseline: `attention=None`).

        h_j = RNN_enc(e_j, h_{j-1})                       (RecurrentEncoder)
        s_t = RNN_dec([y_{t-1}; c_t or h̃_{t-1}], s_{t-1})  (AttentionDecoder)
        p(y_t | y_<t, x) = softmax(W_o [s_t; c_t] + b_o)

    Without attention the decoder sees the source only through its initial
    state, the fixed-size bottleneck the seeds contrast attention with.

    Args:
        source_vocab_size, target_vocab_size: ints.
        embed_dim: int, token embedding width.
        hidden_dim: int, RNN width (each direction of the encoder).
        attention: a name `keras_attention.get` resolves ("dot",
            "scaled_dot", "general", "additive", "concat", "local",
            "multihead"), an attention layer, a config, or None.
        style: "bahdanau" or "luong"; input_feeding, context_input: see
            `AttentionDecoder`.
        num_layers: int, stacked RNN layers of the encoder; the decoder has
            `num_decoder_layers` (default the same).
        cell, bidirectional, reverse_source, dropout: see `RecurrentEncoder`.
        **kwargs: `Seq2Seq` arguments (special ids, scheduled sampling).

    Call arguments and returns: see `Seq2Seq`.

    Example:

    >>> model = RecurrentSeq2Seq(20, 20, embed_dim=8, hidden_dim=16, attention="additive")
    >>> tuple(model((np.array([[3, 4, 5]]), np.array([[1, 6]]))).shape)
    (1, 2, 20)

    References:
        Sutskever et al., "Sequence to Sequence Learning with Neural
        Networks" (2014); Bahdanau et al. (2015); Luong et al. (2015).
    """

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size,
        embed_dim=64,
        hidden_dim=64,
        attention="general",
        style="luong",
        input_feeding=True,
        context_input=False,
        num_layers=1,
        num_decoder_layers=None,
        cell="lstm",
        bidirectional=False,
        reverse_source=False,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if isinstance(attention, str) and attention not in registry.names():
            raise ValueError(
                f"`attention` of RecurrentSeq2Seq must be one of {list(registry.names())}, an "
                f"attention layer, its config, or None; received attention={attention!r}."
            )
        self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
        self.check_special_ids()
        self.embed_dim, self.hidden_dim = embed_dim, hidden_dim
        self.attention_spec = (
            attention
            if attention is None or isinstance(attention, (str, dict))
            else keras.saving.serialize_keras_object(attention)
        )
        self.style, self.input_feeding, self.context_input = style, input_feeding, context_input
        self.num_layers = num_layers
        self.num_decoder_layers = num_decoder_layers or num_layers
        self.cell, self.bidirectional = cell, bidirectional
        self.reverse_source, self.dropout = reverse_source, dropout
        self.encoder = RecurrentEncoder(
            source_vocab_size,
            embed_dim,
            hidden_dim,
            num_layers,
            cell,
            bidirectional,
            reverse_source,
            dropout,
            padding_id=self.padding_id,
            name="encoder",
        )
        self.decoder = AttentionDecoder(
            target_vocab_size,
            embed_dim,
            hidden_dim,
            attention,
            style,
            input_feeding,
            context_input,
            self.num_decoder_layers,
            cell,
            dropout,
            name="decoder",
        )

    def build_layers(self):
        self.encoder.build(TOKENS)
        width = self.encoder.output_width
        states = 2 if self.cell == "lstm" else 1
        self.decoder.build(TOKENS, (None, None, width), [(None, width)] * states)

    def encode(self, source, max_length=None, training=None):
        source = self.check_source(source)
        memory, final_state = self.encoder(source, training=training)
        return self.decoder.init_cache(memory, final_state, self.encoder.source_mask(source))

    def beam_invariant_state(self):
        """The attention's memory (the encoder's outputs), its mask and
        prepared keys, the encoder's summary fed at every step
        (`context_input`) and the step counter; the cells' states and the
        fed context are each beam's own."""
        paths = [("memory",), ("memory_mask",), ("step",)]
        if self.decoder._prepares_key():
            paths.append(("keys",))
        if self.context_input:
            paths.append(("context",))
        return paths

    def decode_step(self, tokens, state, training=None):
        logits, weights, state = self.decoder.step(
            ops.cast(tokens, "int32"), state, training=training
        )
        return logits, state, weights

    @compat.renamed_arguments(
        "RecurrentSeq2Seq.teacher_forced", return_attention="return_attention_scores"
    )
    def teacher_forced(self, source, target_in, training=None, return_attention_scores=False):
        source = self.check_source(source)
        memory, final_state = self.encoder(source, training=training)
        logits, weights = self.decoder(
            target_in, memory, final_state, self.encoder.source_mask(source), training=training
        )
        return (logits, weights) if return_attention_scores else logits

    @property
    def has_attention(self):
        return self.decoder.attention is not None

    def attention_weights(self, source, target_in):
        if self.decoder.attention is None:
            return {}  # the bottleneck baseline has no alignment
        return {
            "attention": self.teacher_forced(source, target_in, return_attention_scores=True)[1]
        }

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocab_size": self.source_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "embed_dim": self.embed_dim,
            "hidden_dim": self.hidden_dim,
            "attention": self.attention_spec,
            "style": self.style,
            "input_feeding": self.input_feeding,
            "context_input": self.context_input,
            "num_layers": self.num_layers,
            "num_decoder_layers": self.num_decoder_layers,
            "cell": self.cell,
            "bidirectional": self.bidirectional,
            "reverse_source": self.reverse_source,
            "dropout": self.dropout,
        }
