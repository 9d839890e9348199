"""Learning the translation recipe's vocabularies on the Ding corpus:
SentencePiece (`train_sentencepiece`, the default) against WordPiece
(`build_vocabulary`, tensorflow-text's learner), on the training split of
each side, as `keras-attention-translate train` learns them.

For each: the seconds to learn it, its size (`--vocab-size` asks for 8000),
how many training sentences decode back exactly (`decode(encode(x)) == x`),
and the mean pieces per sentence. One run, one learning each (each takes
long enough that a median would cost minutes of a shared CPU).

    python bench/vocabulary.py [--vocab-size 8000] [--output /tmp/vocabulary-bench]
"""

import argparse
import os
import tempfile
import time

from keras_attention_recipes.runs import import_tensorflow_quietly

import_tensorflow_quietly()  # TensorFlow's CUDA probe messages on a CPU machine

import tensorflow as tf  # noqa: E402
from keras_attention_recipes.translation.corpus import read_pairs
from keras_attention_recipes.translation.splits import prepare

from keras_attention.tokenizers import (  # noqa: E402
    build_vocabulary,
    load_tokenizer,
    train_sentencepiece,
)

LEARNERS = (("SentencePiece", train_sentencepiece, "spm"), ("WordPiece", build_vocabulary, "vocab"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--output", default=None, help="folder for the split (default: temporary)")
    args = parser.parse_args()
    output = args.output or tempfile.mkdtemp(prefix="vocabulary-bench-")
    pairs = read_pairs(prepare(output, None, False, None, log=print)["train"])
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| side | tokenizer | seconds | size | exact round trips | pieces per sentence |")
    print("|---|---|---|---|---|---|")
    seconds = {}
    for column, side in enumerate(("German (source)", "English (target)")):
        texts = [pair[column] for pair in pairs]
        for name, learn, suffix in LEARNERS:
            path = os.path.join(output, f"{column}.{suffix}")
            started = time.perf_counter()
            size = learn(texts, path, args.vocab_size)
            seconds[side, name] = time.perf_counter() - started
            tokenizer = load_tokenizer(path)
            ids, truncated = tokenizer.encode(tf.constant(texts), 512)
            assert not truncated.numpy().any()
            decoded = [text.decode() for text in tokenizer.decode(ids).numpy()]
            exact = sum(back == text for back, text in zip(decoded, texts))
            pieces = float(tf.reduce_sum(tf.cast(ids > 3, tf.float32))) / len(texts)
            print(
                f"| {side} | {name} | {seconds[side, name]:.1f} | {size} | "
                f"{exact}/{len(texts)} ({100 * exact / len(texts):.1f}%) | {pieces:.1f} |",
                flush=True,
            )
    for side in ("German (source)", "English (target)"):
        ratio = seconds[side, "WordPiece"] / seconds[side, "SentencePiece"]
        print(f"{side}: WordPiece takes {ratio:.0f}x SentencePiece's time")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
