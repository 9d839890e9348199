"""Training speed of the recurrent family against tensorflow-addons:
target tokens per second of one training step (forward, backward, Adam)
of `RecurrentSeq2Seq` and of tfa's `AttentionWrapper` + `BasicDecoder`,
at this shape:

    batch 64, source and target length 20, vocabulary 8000 (both sides),
    embeddings 256, one LSTM layer of 256 on each side, Bahdanau's score
    (`attention="additive"`, tfa's `BahdanauAttention(256)`) queried with
    the new decoder state (Luong style), h̃_t = [s_t; c_t], logits W_o h̃_t,
    token cross-entropy over the non-padding targets, Adam.

Two configurations: with input feeding (h̃_{t-1} enters the cell with
y_{t-1}; the issue's) and without (`input_feeding=False`; tfa's
`cell_input_fn` then passes the embedding alone). The tfa model
(`bench/rnn_tfa.py`) runs in a worker process of the virtualenv
`--tfa-python` (TensorFlow 2.15.1, tensorflow-addons 0.23.0: `make
bench-rnn` creates it) and is skipped when that is missing. Weights are
random and differ between the two; the architecture is the same and the
parameter counts are printed (tfa's Bahdanau score has no bias inside its
tanh: U = 256 fewer parameters).

Ours and tfa are timed in turn within each round, `--repeats` rounds of
`--iters` steps; tokens/s (batch x target length / time) are medians, and
the ratio is the median of same-round ratios. `--xla` adds ours with
`jit_compile=True`; `--profile` adds where our step's time goes.

    python bench/rnn.py [--repeats 7] [--iters 3] [--xla] [--profile] [--smoke]
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention.seq2seq import MaskedCrossEntropy, RecurrentSeq2Seq  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from timing import PeerWorker, median_ratio  # noqa: E402

CONFIGS = {"feeding": True, "no-feeding": False}  # name -> input_feeding


class Tfa(PeerWorker):
    """The worker of `bench/rnn_tfa.py` in the tfa virtualenv."""

    def __init__(self, python, data_path, args, workdir):
        command = [python, os.path.join(HERE, "rnn_tfa.py"), "--data", data_path]
        command += ["--vocab", str(args.vocab), "--embed-dim", str(args.embed_dim)]
        command += ["--units", str(args.units), "--threads", str(args.threads)]
        super().__init__(command, os.path.join(workdir, "tfa.log"), "the tfa worker")
        self.versions, self.parameters = self.ready["ready"], self.ready["parameters"]

    def time(self, system, iters):
        return self.request(op="time", system=system, iters=iters)["seconds"]


def build(args, input_feeding):
    model = RecurrentSeq2Seq(
        args.vocab,
        args.vocab,
        embed_dim=args.embed_dim,
        hidden_dim=args.units,
        attention="additive",
        style="luong",
        input_feeding=input_feeding,
    )
    model.build()
    return model


def training_step(model, jit_compile=False):
    """One forward, backward and Adam update, as a `tf.function`."""
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = MaskedCrossEntropy()

    def step(source, target_in, target_out):
        with tf.GradientTape() as tape:
            loss = loss_fn(target_out, model((source, target_in), training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return tf.function(step, jit_compile=jit_compile)


def timed(fn, data, iters):
    start = time.perf_counter()
    for _ in range(iters):
        loss = fn(*data)
    float(loss)
    return (time.perf_counter() - start) / iters


def consume(tensors):
    """A scalar that reads one element of each tensor, so that no part of
    a profiled graph is pruned as unused."""
    return tf.add_n([tf.cast(tf.reshape(t, [-1])[0], tf.float32) for t in tensors])


def profile(model, data, repeats, iters):
    """Where one training step of `model` goes: the whole step against
    pieces of it run alone (each a `tf.function`, all gradients read):
    forward, forward + backward, and, forward + backward each, the encoder,
    the decoder up to its output layer, and the output layer with the loss;
    the Adam update alone."""
    source, target_in, target_out = data
    loss_fn = MaskedCrossEntropy()
    variables = model.trainable_variables
    decoder = model.decoder
    memory, final_state = model.encoder(source)
    memory_mask = model.encoder.source_mask(source)
    width = decoder.output_projection.kernel.shape[0]
    features = tf.random.normal(tuple(target_in.shape) + (width,))
    grads = [tf.zeros_like(v) for v in variables]
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(variables)

    def forward(source, target_in, target_out):
        return loss_fn(target_out, model((source, target_in), training=True))

    def gradients(source, target_in, target_out):
        with tf.GradientTape() as tape:
            loss = forward(source, target_in, target_out)
        return consume(tape.gradient(loss, variables))

    def encoder(source, target_in, target_out):
        with tf.GradientTape() as tape:
            outputs, state = model.encoder(source, training=True)
            loss = tf.reduce_sum(outputs) + tf.add_n([tf.reduce_sum(s) for s in state])
        return consume(tape.gradient(loss, model.encoder.trainable_variables))

    def recurrence(source, target_in, target_out):
        # The decoder up to its output layer (`_features`, what `call`
        # projects), gradients for its weights and the memory.
        inner = [w for w in decoder.trainable_variables if all(w is not v for v in output_weights)]
        with tf.GradientTape() as tape:
            tape.watch(memory)
            outputs, _ = decoder._features(
                target_in, memory, final_state, memory_mask, training=True
            )
            loss = tf.reduce_sum(outputs)
        return consume(tape.gradient(loss, inner + [memory]))

    output_weights = decoder.output_projection.trainable_variables

    def output_layer(source, target_in, target_out):
        with tf.GradientTape() as tape:
            tape.watch(features)
            loss = loss_fn(target_out, decoder.output_projection(features))
        return consume(tape.gradient(loss, output_weights + [features]))

    def adam(source, target_in, target_out):
        optimizer.apply(grads, variables)
        return tf.constant(0.0)

    parts = {
        "whole step": training_step(model),
        "forward": forward,
        "forward + backward": gradients,
        "encoder (fwd + bwd)": encoder,
        "decoder recurrence (fwd + bwd)": recurrence,
        "output layer + loss (fwd + bwd)": output_layer,
        "Adam update": adam,
    }
    parts = {name: tf.function(fn) for name, fn in parts.items()}
    for fn in parts.values():
        timed(fn, data, 1)
    times = {name: [] for name in parts}
    for _ in range(repeats):
        for name, fn in parts.items():
            times[name].append(timed(fn, data, iters))
    whole = times["whole step"]
    print("  share of the whole step (median of same-round ratios):")
    for name, seconds in times.items():
        print(f"    {name:34s} {median_ratio(seconds, whole):5.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--target-length", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--embed-dim", type=int, default=256)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="feeding,no-feeding")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=3, help="steps per timing")
    parser.add_argument(
        "--tfa-python",
        default=os.path.join(os.path.dirname(HERE), ".venv-bench-tfa", "bin", "python"),
        help="the python of the tfa virtualenv (make bench-rnn creates it)",
    )
    parser.add_argument("--no-tfa", action="store_true", help="ours only")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count(), help="intra-op threads of both"
    )
    parser.add_argument("--xla", action="store_true", help="also ours with jit_compile=True")
    parser.add_argument("--profile", action="store_true", help="where our step's time goes")
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: a tiny model, ours only (tests)"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.batch, args.source_length, args.target_length, args.vocab = 4, 5, 4, 50
        args.embed_dim, args.units, args.repeats, args.iters = 8, 8, 1, 1
        args.no_tfa = True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    except RuntimeError:  # TensorFlow already ran something here (the smoke test)
        pass
    configs = args.configs.split(",")
    rng = np.random.default_rng(0)
    source = rng.integers(4, args.vocab, (args.batch, args.source_length)).astype("int32")
    target = rng.integers(4, args.vocab, (args.batch, args.target_length + 1)).astype("int32")
    target[:, 0] = 1  # <sos>
    arrays = {"source": source, "target_in": target[:, :-1], "target_out": target[:, 1:]}
    data = tuple(tf.constant(arrays[k]) for k in ("source", "target_in", "target_out"))
    workdir = tempfile.mkdtemp(prefix="bench-rnn-")
    try:
        data_path = os.path.join(workdir, "batch.npz")
        np.savez(data_path, **arrays)
        tfa = None
        if not args.no_tfa and os.path.exists(args.tfa_python):
            tfa = Tfa(args.tfa_python, data_path, args, workdir)
        elif not args.no_tfa:
            print(f"no tfa virtualenv at {args.tfa_python} (make bench-rnn): ours only\n")
        measure(args, configs, data, tfa)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def measure(args, configs, data, tfa):
    keras.utils.set_random_seed(0)
    models = {config: build(args, CONFIGS[config]) for config in configs}
    systems = {}  # (config, system) -> call(iters) -> seconds
    for config, model in models.items():
        contenders = {"ours": training_step(model)}
        if args.xla:
            contenders["ours XLA"] = training_step(model, jit_compile=True)
        for name, step in contenders.items():
            try:
                float(step(*data))  # trace, warm up
            except Exception as error:  # XLA may refuse the step's ops
                print(f"{config} {name}: fails ({type(error).__name__}: {str(error)[:200]})")
                continue
            systems[config, name] = lambda iters, step=step: timed(step, data, iters)
        if tfa:
            systems[config, "tfa"] = lambda iters, config=config: tfa.time(config, iters)
    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, {os.cpu_count()} CPUs, "
        f"GPU: {bool(tf.config.list_physical_devices('GPU'))}, {args.threads} threads each"
        + (f"; peer: {tfa.versions}" if tfa else "")
    )
    print(
        f"batch {args.batch}, source and target length {args.source_length}/"
        f"{args.target_length}, vocabulary {args.vocab}, embeddings {args.embed_dim}, "
        f"LSTM {args.units}; {args.repeats} rounds of {args.iters} steps, medians; "
        "tok/s = batch x target length / step time"
    )
    for config, model in models.items():
        line = f"parameters, {config}: ours {model.count_params()}"
        print(line + (f", tfa {tfa.parameters[config]}" if tfa else ""))
    times = {key: [] for key in systems}
    for _ in range(args.repeats):
        for key, call in systems.items():  # ours and tfa in turn
            times[key].append(call(args.iters))
    if tfa:
        tfa.close()
    tokens = args.batch * args.target_length
    print(f"\n{'config':<11s} {'system':<9s} {'tok/s':>8s} {'ours/tfa':>9s}")
    for (config, name), seconds in times.items():
        ratio = ""
        if name != "tfa" and (config, "tfa") in times:
            ratio = f"{median_ratio(times[config, 'tfa'], seconds):9.2f}"
        print(f"{config:<11s} {name:<9s} {tokens / statistics.median(seconds):8.0f} {ratio}")
    print("ours/tfa: tokens/s ratio (> 1: ours faster), the median of same-round ratios")
    if args.profile:
        for config, model in models.items():
            print(f"\nwhere our training step goes, {config}:")
            profile(model, data, args.repeats, args.iters)


if __name__ == "__main__":
    main()
