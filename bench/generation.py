"""Decoding speed: tokens per second of greedy and beam search (K=4) for the
three families, with their incremental caches and without, and beam search
against keras_hub's BeamSampler on the same Transformer.

- cached: the families' `decode_step`, one position per step.
- uncached: a wrapper whose step re-runs the teacher-forced decoder over
  the whole fixed-size target buffer (a `while_loop` needs fixed shapes)
  and reads the logits at the current position: O(L) per token.
- peer: `keras_hub.samplers.BeamSampler(num_beams=4)` driving the same
  Transformer's `decode_step` through its `next(prompt, cache, index)`
  contract, so the model is identical and only the search differs. Both
  searches run all `--length` steps (ours with no `<eos>` to stop on,
  KerasHub's with no stop tokens).

Every decoder is a `tf.function`; contenders are timed alternately,
`--repeats` rounds, medians.

    python bench/generation.py [--batch 8] [--length 32] [--repeats 5]
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

from keras_attention.masking import write_at  # noqa: E402
from keras_attention.seq2seq import ConvS2SSeq2Seq, RecurrentSeq2Seq, TransformerSeq2Seq  # noqa: E402
from keras_attention.seq2seq.generation import beam_search, greedy_search

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import alternate, median_ratio  # noqa: E402

VOCAB = 1000
NEVER = -1  # an <eos> id no search emits (given to the searches): every search runs all steps


class Uncached:
    """A `Seq2Seq` whose decode_step recomputes the whole target buffer."""

    def __init__(self, model):
        self.model = model
        self.sos_id, self.eos_id, self.padding_id = model.sos_id, model.eos_id, model.padding_id

    def encode(self, source, max_length=None):
        batch = ops.shape(source)[0]
        return {
            "source": source,
            "prefix": ops.zeros((batch, max_length), "int32"),
            "step": ops.zeros((batch,), "int32"),
        }

    def decode_step(self, tokens, state):
        index = state["step"][0]
        prefix = write_at(state["prefix"], ops.cast(tokens, "int32")[:, None], index, axis=1)
        logits = ops.take(self.model.teacher_forced(state["source"], prefix), index, axis=1)
        return (
            logits,
            dict(state, prefix=prefix, step=state["step"] + 1),
            ops.zeros(ops.shape(state["source"])),
        )

    def reorder_state(self, state, indices):
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)


def families(width, layers, length):
    return {
        "rnn": RecurrentSeq2Seq(
            VOCAB,
            VOCAB,
            width,
            width,
            attention="general",
            style="luong",
            num_layers=layers,
        ),
        "convs2s": ConvS2SSeq2Seq(
            VOCAB,
            VOCAB,
            width,
            [(width, 3)] * layers,
            [(width, 3)] * layers,
            max_length=length + 1,
        ),
        "transformer": TransformerSeq2Seq(
            VOCAB, VOCAB, width, 4, 2 * width, layers, max_length=length + 1
        ),
    }


def keras_hub_beam(model, length, beams):
    """KerasHub's BeamSampler over `model.decode_step`."""
    import keras_hub

    sampler = keras_hub.samplers.BeamSampler(num_beams=beams)

    def search(source):
        state = model.encode(source, max_length=length + 1)
        batch = ops.shape(source)[0]
        prompt = ops.concatenate(
            [ops.full((batch, 1), model.sos_id, "int32"), ops.zeros((batch, length), "int32")],
            axis=1,
        )

        def next(prompt, cache, index):
            tokens = ops.take(prompt, index - 1, axis=1)
            logits, cache, _ = model.decode_step(tokens, cache)
            return logits, None, cache

        return sampler(next, prompt, cache=state, index=1)

    return search


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--length", type=int, default=32, help="tokens generated")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=2)
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    source = tf.constant(rng.integers(3, VOCAB, (args.batch, args.source_length)), tf.int32)
    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, {os.cpu_count()} CPUs, "
        f"GPU: {bool(tf.config.list_physical_devices('GPU'))}"
    )
    print(
        f"batch {args.batch}, source length {args.source_length}, "
        f"{args.length} tokens generated, width "
        f"{args.width}, {args.layers} layers, beam {args.beam_width}; "
        "tokens/s = batch x length / time\n"
    )
    L, K = args.length, args.beam_width
    tokens = args.batch * L
    print(
        f"{'family':<12s} {'search':<7s} {'cached tok/s':>12s} "
        f"{'uncached tok/s':>15s} {'cached/uncached':>16s}"
    )
    models = families(args.width, args.layers, L)
    for name, model in models.items():
        model((source, ops.ones((args.batch, 2), "int32")))  # build
        for search_name, search in (
            ("greedy", lambda m, s: greedy_search(m, s, L, eos_id=NEVER)["tokens"]),
            (f"beam{K}", lambda m, s: beam_search(m, s, L, beam_width=K, eos_id=NEVER)["tokens"]),
        ):
            cached = tf.function(lambda s, m=model, f=search: f(m, s), autograph=False)
            uncached_model = Uncached(model)
            uncached = tf.function(lambda s, m=uncached_model, f=search: f(m, s), autograph=False)
            times = alternate(
                [(cached, (source,)), (uncached, (source,))], args.repeats, args.iters
            )
            print(
                f"{name:<12s} {search_name:<7s} {tokens / statistics.median(times[0]):12.0f} "
                f"{tokens / statistics.median(times[1]):15.0f} "
                f"{median_ratio(times[1], times[0]):16.1f}"
            )

    try:
        import keras_hub
    except ImportError:
        print(
            "\nkeras_hub is not installed: skipping the BeamSampler comparison "
            "(pip install -e '.[bench]')."
        )
        return
    transformer = models["transformer"]
    ours = tf.function(
        lambda s: beam_search(transformer, s, L, beam_width=K, eos_id=NEVER)["tokens"],
        autograph=False,
    )
    peer = tf.function(keras_hub_beam(transformer, L, K), autograph=False)
    times = alternate([(ours, (source,)), (peer, (source,))], args.repeats, args.iters)
    print(f"\nbeam search, K={K}, same Transformer, keras_hub {keras_hub.__version__}")
    print(f"{'search':<28s} {'tok/s':>8s}")
    print(f"{'keras_attention beam_search':<28s} {tokens / statistics.median(times[0]):8.0f}")
    print(f"{'keras_hub BeamSampler':<28s} {tokens / statistics.median(times[1]):8.0f}")
    print(f"ours/peer speed ratio: {median_ratio(times[1], times[0]):.2f}")


if __name__ == "__main__":
    main()
