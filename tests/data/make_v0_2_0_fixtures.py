"""Writes the files of keras_attention 0.2.0 that `tests/test_compatibility.py`
loads with the current code: each family's `.keras` file with what 0.2.0's
teacher forcing, greedy search and beam search computed, and a translator
exported by 0.2.0's `translator_archive` with the outputs of its signatures.

They were made once, at commit 5d4ad2c (the last 0.2.0 layout, before the
decoding objects, the Translator and the recipe package), with

    git worktree add /tmp/v020 5d4ad2c
    cd /tmp/v020 && KERAS_BACKEND=tensorflow python <this file> <repo>/tests/data/v0_2_0

and are committed; re-running it on a later layout would defeat the test.
"""

import json
import os
import sys

import keras
import numpy as np

import keras_attention as ka

SOURCE = np.array([[4, 5, 6, 7, 0], [8, 9, 10, 0, 0]], "int32")
TARGET_IN = np.array([[1, 5, 6, 7], [1, 8, 9, 0]], "int32")
BEAM = dict(beam_width=3, num_hypotheses=2, alpha=0.8, min_length=1)
TEXTS = ["ich habe zeit .", "zeit", "", "habe ich zeit ? zeit ."]


def model_cases():
    return {
        "rnn_additive": ka.RecurrentSeq2Seq(20, 21, 8, 8, attention="additive"),
        "convs2s": ka.ConvS2SSeq2Seq(20, 21, 8, ((8, 3),) * 2, ((8, 3),) * 2, max_length=10),
        "transformer": ka.TransformerSeq2Seq(
            20, 21, hidden_dim=8, num_heads=2, intermediate_dim=16, num_layers=1, max_length=10
        ),
    }


def write_models(out):
    from keras_attention.seq2seq import beam_search, greedy_search

    for name, model in model_cases().items():
        logits = model((SOURCE, TARGET_IN))
        greedy = greedy_search(model, SOURCE, 6, return_attention=True)
        beam = beam_search(model, SOURCE, 6, **BEAM)
        model.save(os.path.join(out, f"{name}.keras"))
        arrays = {f"greedy_{k}": v for k, v in greedy.items()}
        arrays.update({f"beam_{k}": v for k, v in beam.items()})
        np.savez(
            os.path.join(out, f"{name}.npz"),
            source=SOURCE,
            target_in=TARGET_IN,
            output=keras.ops.convert_to_numpy(logits),
            **{k: keras.ops.convert_to_numpy(v) for k, v in arrays.items()},
        )


def write_export(out):
    import tensorflow as tf

    from keras_attention.serving.export import export_archive, translator_archive
    from keras_attention.serving.text import RESERVED, SubwordTokenizer

    vocabulary = os.path.join(out, "translator_vocab.txt")
    with open(vocabulary, "w") as handle:
        handle.write("\n".join(RESERVED + ["ich", "habe", "zeit", ".", "?"]) + "\n")
    tokenizer = SubwordTokenizer(vocabulary)
    model = ka.RecurrentSeq2Seq(9, 9, embed_dim=4, hidden_dim=8, attention="general")
    model.build()
    model.save(os.path.join(out, "translator.keras"))
    archive = translator_archive(
        model, tokenizer, tokenizer, max_length=6, beam_width=3, alpha=0.9, min_length=1
    )
    path = export_archive(archive, os.path.join(out, "exports"), "translator", version=1)
    loaded = tf.saved_model.load(path)
    text = tf.constant(TEXTS)
    outputs = {
        "serving_default": loaded.signatures["serving_default"](text=text),
        "greedy": loaded.signatures["greedy"](text=text),
        "nbest": loaded.signatures["nbest"](text=text),
        "constrained": loaded.signatures["constrained"](
            text=text, prefix=tf.constant(["habe", "", "zeit", ""])
        ),
        "decoding_options": loaded.signatures["decoding_options"](),
    }

    def plain(value):
        value = value.numpy()
        if isinstance(value, bytes):
            return value.decode("utf-8")
        value = np.asarray(value)
        if value.dtype == object:
            decode = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])
            return decode(value).tolist()
        return value.tolist()

    record = {
        signature: {name: plain(value) for name, value in result.items()}
        for signature, result in outputs.items()
    }
    record["texts"] = TEXTS
    with open(os.path.join(out, "translator_outputs.json"), "w") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)


def main(out):
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(0)
    write_models(out)
    write_export(out)


if __name__ == "__main__":
    main(sys.argv[1])
