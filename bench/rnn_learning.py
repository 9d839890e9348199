"""How fast the recurrent family learns Ding, beside a plain Keras RNN and
ConvS2S: the validation loss after each epoch of the same batches.

RESULTS.md's family table has the attention RNN at BLEU 1.18 after 12
epochs where ConvS2S reaches 10.01, and reads that as the family's slow
learning per update, not a bug of ours. This checks the reading against a
peer. On a run's training split (its tokenizers and `train.tsv`, without
the dictionary's draws or number placeholders), every model sees the same bucketed batches in the
same order (`--batch-tokens 1536`, seed 0) and is scored on the run's
validation split after each epoch:

- `ours`: the recipe's RNN (`model.build_model`, `--family rnn
  --attention general`): 2 LSTM layers a side, Luong's general score,
  input feeding;
- `keras`: the same shape from `keras.layers` alone (`LSTM`, `Attention`
  over a bias-free projection of the decoder state, which is Luong's
  general score s_t W h_j, then tanh(W_c [c_t; s_t])), with no input
  feeding: Keras has no layer for it;
- `bidirectional`: ours with a bidirectional encoder (the recipe has no
  flag for it);
- `convs2s`: the demo's ConvS2S (peak rate `--convs2s-rate`, the demo's).

Each has the recipe's loss (`MaskedCrossEntropy`, label smoothing 0.1) and
optimizer (Adam, global clip norm 1, `--warmup` steps to `--learning-rate`,
then 1/sqrt(step)), dropout 0.1, width `--units`. The losses are the
recipe's mean over batches. One model a process; to compare two in one
run, pin one to each core:

    taskset -c 0 python bench/rnn_learning.py --run runs/demo --model ours &
    taskset -c 1 python bench/rnn_learning.py --run runs/demo --model keras &
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from keras_attention_recipes.translation import model as model_module  # noqa: E402
from keras_attention_recipes.translation.data import load_tokenizers
from keras_attention_recipes.translation.pipeline import make_dataset

from keras_attention.seq2seq import (  # noqa: E402
    MaskedCrossEntropy,
    RecurrentSeq2Seq,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402 (bench/machine.py)

MODELS = ("ours", "keras", "bidirectional", "convs2s")


class _Unmasked(keras.layers.Layer):
    """Drops the Keras mask, so the loss sees every position and leaves
    padding to `MaskedCrossEntropy`, as with the recipe's models."""

    def call(self, inputs):
        return inputs

    def compute_mask(self, inputs, mask=None):
        return None


def keras_reference(source_vocab, target_vocab, embed_dim, units, dropout, num_layers=2):
    """A Luong attention RNN from `keras.layers` alone, taking `(source,
    target_in)` and returning logits `(B, T, V)`. Source padding (id 0) is
    masked in the encoder and in the attention; the decoder's layer `l`
    starts from the encoder's layer `l` final state."""
    layers = keras.layers
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    x = layers.Embedding(source_vocab, embed_dim, mask_zero=True)(source)
    states = []
    for _ in range(num_layers):
        x, h, c = layers.LSTM(units, return_sequences=True, return_state=True)(
            layers.Dropout(dropout)(x)
        )
        states.append([h, c])
    y = layers.Embedding(target_vocab, embed_dim)(target)  # its padding: only in the loss
    for state in states:
        y = layers.LSTM(units, return_sequences=True)(
            layers.Dropout(dropout)(y), initial_state=state
        )
    query = layers.Dense(units, use_bias=False)(y)  # s_t W: the general score's bilinear form
    context = layers.Attention()([query, x])  # the value's mask: the source's padding
    combined = layers.Dense(units, activation="tanh", use_bias=False)(
        layers.Concatenate()([context, y])
    )
    logits = layers.Dense(target_vocab)(layers.Dropout(dropout)(combined))
    return keras.Model([source, target], _Unmasked()(logits))


def build(name, source_vocab, target_vocab, units, learning_rate, warmup, convs2s_rate):
    """The compiled model `name` (one of `MODELS`)."""
    config = {
        "family": "convs2s" if name == "convs2s" else "rnn",
        "attention": "general",
        "style": "luong",
        "embed_dim": units,
        "hidden_dim": units,
        "num_layers": 2,
        "max_length": 32,
        "dropout": 0.1,
        "label_smoothing": 0.1,
        "learning_rate": convs2s_rate if name == "convs2s" else learning_rate,
        "warmup": warmup,
        "decay": "rsqrt",
    }
    if name in ("ours", "convs2s"):
        return model_module.build_model(config, source_vocab, target_vocab)
    if name == "bidirectional":
        model = RecurrentSeq2Seq(
            source_vocab, target_vocab, units, units, "general", num_layers=2,
            dropout=0.1, bidirectional=True,
        )  # fmt: skip
        model.build()
    else:
        model = keras_reference(source_vocab, target_vocab, units, units, 0.1)
    optimizer = keras.optimizers.Adam(model_module.learning_rate(config), global_clipnorm=1.0)
    model.compile(optimizer, MaskedCrossEntropy(label_smoothing=0.1))
    return model


def curve(run, name, epochs, units=128, learning_rate=3e-3, warmup=400, convs2s_rate=5e-3):
    """Train model `name` on the run's training split for `epochs` epochs;
    returns one dict an epoch: `epoch`, `train_loss`, `valid_loss`,
    `seconds`."""
    if name not in MODELS:
        raise ValueError(f"`name`: expected one of {list(MODELS)}; received {name!r}")
    splits = [os.path.join(run, "data", f"{split}.tsv") for split in ("train", "valid")]
    for path in splits:
        if not os.path.isfile(path):
            raise ValueError(
                f"`run`: expected a translation run's folder, with {path}; received {run!r}"
            )
    keras.utils.set_random_seed(0)
    source_tokenizer, target_tokenizer = load_tokenizers(run)
    train, _, _ = make_dataset(
        splits[0], source_tokenizer, target_tokenizer, 32, 64, shuffle=True, batch_tokens=1536
    )
    valid, _, _ = make_dataset(
        splits[1], source_tokenizer, target_tokenizer, 32, 64, batch_tokens=1536
    )
    if name == "keras":  # a functional model takes its inputs as a list
        train, valid = (d.map(lambda pair, out: ((pair[0], pair[1]), out)) for d in (train, valid))
    sizes = source_tokenizer.vocab_size, target_tokenizer.vocab_size
    model = build(name, *sizes, units, learning_rate, warmup, convs2s_rate)
    rows = []
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        history = model.fit(train, epochs=1, verbose=0, shuffle=False)  # shuffled by tf.data
        seconds = time.perf_counter() - started
        valid_loss = model.evaluate(valid, verbose=0, return_dict=True)["loss"]
        rows.append(
            {
                "epoch": epoch,
                "train_loss": round(float(history.history["loss"][-1]), 4),
                "valid_loss": round(float(valid_loss), 4),
                "seconds": round(seconds, 1),
            }
        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/demo", help="a translation run's folder")
    parser.add_argument("--model", choices=MODELS, default="ours")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="the RNNs' peak")
    parser.add_argument("--convs2s-rate", type=float, default=5e-3, help="ConvS2S's peak")
    parser.add_argument("--warmup", type=int, default=400)
    args = parser.parse_args(argv)
    print(f"{args.model} on {args.run}: {describe()}", flush=True)
    rows = curve(
        args.run, args.model, args.epochs, args.units, args.learning_rate, args.warmup,
        args.convs2s_rate,
    )  # fmt: skip
    for row in rows:
        print(json.dumps({"model": args.model, **row}), flush=True)


if __name__ == "__main__":
    main()
