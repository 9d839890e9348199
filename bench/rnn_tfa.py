"""The peer of `bench/rnn.py`, run in its own virtualenv (TensorFlow 2.15.1
and tensorflow-addons 0.23.0, the last release; see `make bench-rnn`): one
training step of tfa's recurrent encoder-decoder with attention,
`AttentionWrapper` + `BasicDecoder`, the architecture of keras_attention's
`RecurrentSeq2Seq(attention="additive", style="luong", input_feeding=True)`:

    h_j = LSTM_enc(E_x x_j, h_{j-1}),  s_0 = h_S
    s_t = LSTMCell([E_y y_{t-1}; h̃_{t-1}], s_{t-1})       (input feeding)
    e_tj = vᵀ tanh(W_q s_t + W_k h_j)                       (BahdanauAttention)
    c_t = Σ_j a_tj h_j,   h̃_t = [s_t; c_t]                  (the attention layer)
    logits_t = W_o h̃_t + b_o                               (BasicDecoder's output layer)

and, as `input_feeding=False`, the same without h̃_{t-1} in the cell's
input (`cell_input_fn` returns the embedding alone).

tfa's attention layer is a `Dense` when `attention_layer_size` is given; our
decoder's h̃_t is the plain concatenation, so the wrapper gets an identity
layer (`attention_layer=Identity()`; tfa applies any Keras layer given
there to `[s_t; c_t]`). One difference in weights: tfa's
`BahdanauAttention` has no bias `b` inside the tanh (with
`normalize=False`), ours has one (U more parameters).

A worker: it reads one JSON request per line on stdin and answers one JSON
line on stdout, so the benchmark can alternate it with its own steps.

    {"op": "time", "system": "feeding" | "no-feeding", "iters": 3}
        -> {"seconds": mean seconds per step, "loss": last loss}
    {"op": "quit"}

The first line it writes is `{"ready": versions, "parameters": {system: count}}`.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_addons as tfa  # noqa: E402

PAD = 0


class Identity(tf.keras.layers.Layer):
    """h̃_t = [s_t; c_t]: what the wrapper concatenated, unchanged."""

    def call(self, inputs):
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape


class TfaSeq2Seq(tf.keras.Model):
    def __init__(self, vocab, embed_dim, units, input_feeding=True):
        super().__init__()
        self.source_embedding = tf.keras.layers.Embedding(vocab, embed_dim)
        self.encoder = tf.keras.layers.LSTM(units, return_sequences=True, return_state=True)
        self.target_embedding = tf.keras.layers.Embedding(vocab, embed_dim)
        self.mechanism = tfa.seq2seq.BahdanauAttention(units)
        self.cell = tfa.seq2seq.AttentionWrapper(
            tf.keras.layers.LSTMCell(units),
            self.mechanism,
            attention_layer=Identity(),
            cell_input_fn=None if input_feeding else (lambda inputs, attention: inputs),
        )
        self.decoder = tfa.seq2seq.BasicDecoder(
            self.cell, tfa.seq2seq.TrainingSampler(), output_layer=tf.keras.layers.Dense(vocab)
        )

    def call(self, inputs):
        source, target_in = inputs
        source_mask = tf.not_equal(source, PAD)
        memory, h, c = self.encoder(self.source_embedding(source), mask=source_mask)
        self.mechanism.setup_memory(
            memory, memory_sequence_length=tf.reduce_sum(tf.cast(source_mask, tf.int32), 1)
        )
        batch = tf.shape(source)[0]
        state = self.cell.get_initial_state(batch_size=batch, dtype=tf.float32)
        state = state.clone(cell_state=[h, c])
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(target_in, PAD), tf.int32), 1)
        outputs, _, _ = self.decoder(
            self.target_embedding(target_in), initial_state=state, sequence_length=lengths
        )
        return outputs.rnn_output  # (B, T, V)


def masked_cross_entropy(labels, logits):
    """Mean token cross-entropy over non-padding labels (as
    keras_attention's `MaskedCrossEntropy` without smoothing)."""
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    mask = tf.cast(tf.not_equal(labels, PAD), logits.dtype)
    return tf.reduce_sum(losses * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def training_step(args, input_feeding, source):
    """A `tf.function` of one forward, backward and Adam update; and the
    model's parameter count."""
    model = TfaSeq2Seq(args.vocab, args.embed_dim, args.units, input_feeding)
    optimizer = tf.keras.optimizers.Adam(1e-3)
    model((source, source))
    optimizer.build(model.trainable_variables)

    @tf.function
    def train_step(source, target_in, target_out):
        with tf.GradientTape() as tape:
            loss = masked_cross_entropy(target_out, model((source, target_in), training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step, int(model.count_params())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True, help=".npz with source, target_in, target_out")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--embed-dim", type=int, default=256)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.random.set_seed(0)
    data = np.load(args.data)
    source, target_in, target_out = (
        tf.constant(data[k]) for k in ("source", "target_in", "target_out")
    )
    steps, parameters = {}, {}
    for system in ("feeding", "no-feeding"):
        steps[system], parameters[system] = training_step(args, system == "feeding", source)
        float(steps[system](source, target_in, target_out))  # trace and warm up
    versions = {"tensorflow": tf.__version__, "tensorflow-addons": tfa.__version__}
    print(json.dumps({"ready": versions, "parameters": parameters}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        train_step = steps[request["system"]]
        start = time.perf_counter()
        for _ in range(request["iters"]):
            loss = train_step(source, target_in, target_out)
        float(loss)
        seconds = (time.perf_counter() - start) / request["iters"]
        print(json.dumps({"seconds": seconds, "loss": float(loss)}), flush=True)


if __name__ == "__main__":
    main()
