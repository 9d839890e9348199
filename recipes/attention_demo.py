"""The library at work on a task whose right answer is an alignment.

Each model reads T random digits and must output them reversed. Its only
route from source to output is one attention layer: output position t asks
(query = a learned embedding of t) which source position to copy, so a model
that solves the task must learn the anti-diagonal alignment t -> T-1-t. The
script trains one tiny model per mechanism for a few seconds, then prints
its exact-match accuracy on unseen sequences and the alignment it learned.

    keras-attention-demo                  # every mechanism
    keras-attention-demo --attention additive --epochs 20
"""

import argparse
import time

import numpy as np

from .runs import import_tensorflow_quietly

# Keras (and its backend) is imported once the arguments are parsed, so that
# `--help` answers at once.

# demo name -> (registry name, overrides); widths come from the inputs.
MECHANISMS = {
    "dot": ("scaled_dot", {}),
    "general": ("general", {}),
    "additive": ("additive", {}),
    "concat": ("concat", {}),
    "local-monotonic": ("local", {"window": 7, "mode": "monotonic"}),
    "multihead": ("multihead", {"num_heads": 2}),
}
VOCAB = 10  # digits 0..9
SHADES = " .:-=+*#%@"


def make_data(count, length, rng):
    source = rng.integers(0, VOCAB, size=(count, length))
    positions = np.tile(np.arange(length), (count, 1))
    return (source, positions), source[:, ::-1]


def build_model(mechanism, length, width):
    import keras

    import keras_attention
    from keras_attention import PositionalEmbedding

    source = keras.Input((length,), dtype="int32", name="source")
    positions = keras.Input((length,), dtype="int32", name="positions")
    keys = keras.layers.Embedding(VOCAB, width)(source)
    keys = PositionalEmbedding(max_length=length)(keys)  # e = w + p
    queries = keras.layers.Embedding(length, width)(positions)
    name, overrides = MECHANISMS[mechanism]
    attention = keras_attention.get(name, **overrides)
    context, scores = attention(queries, keys, return_attention_scores=True)
    logits = keras.layers.Dense(VOCAB)(context)
    model = keras.Model([source, positions], logits)
    return model, keras.Model([source, positions], scores)


def show_alignment(weights, length):
    """ASCII heat map of (target position, source position) weights."""
    lines = ["        source position ->", "        " + "".join(str(j % 10) for j in range(length))]
    for t in range(length):
        row = "".join(SHADES[min(int(w * len(SHADES)), len(SHADES) - 1)] for w in weights[t])
        lines.append(f"  t={t:<3d} {row}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--attention",
        choices=["all", *MECHANISMS],
        default="all",
        help="mechanism to train (default: all of them)",
    )
    parser.add_argument("--length", type=int, default=8, help="sequence length T (default 8)")
    parser.add_argument("--width", type=int, default=32, help="embedding width (default 32)")
    parser.add_argument("--epochs", type=int, default=12, help="training epochs (default 12)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.length < 2 or args.width < 2 or args.epochs < 1:
        parser.error("--length and --width must be >= 2 and --epochs >= 1")

    import_tensorflow_quietly()  # before Keras: no C++ start-up lines (cuInit, oneDNN)
    import keras

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_x, train_y = make_data(6000, args.length, rng)
    test_x, test_y = make_data(1000, args.length, rng)
    chosen = list(MECHANISMS) if args.attention == "all" else [args.attention]

    results = []
    for name in chosen:
        model, score_model = build_model(name, args.length, args.width)
        model.compile(
            keras.optimizers.Adam(1e-2),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        start = time.perf_counter()
        model.fit(train_x, train_y, batch_size=64, epochs=args.epochs, verbose=0)
        seconds = time.perf_counter() - start
        predicted = model.predict(test_x, verbose=0).argmax(-1)
        token_accuracy = float((predicted == test_y).mean())
        exact = float((predicted == test_y).all(-1).mean())
        weights = np.asarray(score_model.predict(test_x, verbose=0))
        if weights.ndim == 4:  # MultiHead: (B, H, Tq, Tv) -> mean over heads
            weights = weights.mean(1)
        alignment = weights.mean(0)  # (Tq, Tv), averaged over test sequences
        diagonal = float(np.mean([alignment[t, args.length - 1 - t] for t in range(args.length)]))
        results.append((name, token_accuracy, exact, diagonal, seconds))
        print(
            f"\n== {name}: token accuracy {token_accuracy:.3f}, exact match {exact:.3f}, "
            f"weight on the anti-diagonal {diagonal:.2f} ({seconds:.0f}s of training)"
        )
        print(show_alignment(alignment, args.length))

    print("\nmechanism         token acc  exact match  anti-diagonal weight")
    for name, token_accuracy, exact, diagonal, _ in results:
        print(f"{name:<17s} {token_accuracy:9.3f}  {exact:11.3f}  {diagonal:20.2f}")


if __name__ == "__main__":
    main()
