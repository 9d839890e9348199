"""A trained run's vocabulary shortlist (`export --shortlist K`, `export
--format ctranslate2 --shortlist K`): the table of likely target pieces
per source piece, learned from the run's training split as it was
tokenised for training (`shards.text_encoder`: the SentencePiece models'
Python twins, numbers protected as the run did), then
`keras_attention.seq2seq.Shortlist.learn`."""

import os

from .shards import text_encoder

SAMPLE = 200_000  # training pairs the table is learned from, at most (the first ones)
CHUNK = 4096  # lines tokenised at a time


def training_pairs(output, max_length, protect_numbers, limit=SAMPLE):
    """The ids `(source, target)` of the first `limit` pairs of the run's
    training split that fit `max_length`, without padding."""
    from keras_attention.tokenizers.pieces import SentencePieceEncoder

    encoders = [
        SentencePieceEncoder(os.path.join(output, f"{side}.spm")) for side in ("source", "target")
    ]
    encode = text_encoder(*encoders, max_length, protect_numbers)
    pairs, chunk = [], []

    def add(chunk):
        source, target, fits = encode(chunk)
        for row in fits.nonzero()[0]:
            pairs.append((source[row][source[row] > 0], target[row][target[row] > 0]))

    with open(os.path.join(output, "data", "train.tsv"), "rb") as handle:
        for count, line in enumerate(handle):
            if count == limit:
                break
            chunk.append(line.rstrip(b"\r\n"))
            if len(chunk) == CHUNK:
                add(chunk)
                chunk = []
    if chunk:
        add(chunk)
    return pairs, encoders


def learn_shortlist(output, record, size, log=print):
    """The `Shortlist` of `size` target pieces per request for the run in
    `output` (its `config.json` is `record`), the number placeholder always
    listed when the run protects numbers. `ValueError` for a `size` beyond
    the target vocabulary."""
    from keras_attention.seq2seq import Shortlist
    from keras_attention.tokenizers.number_rules import PLACEHOLDER
    from keras_attention.tokenizers.pieces import read_model

    protect = bool(record.get("protect_numbers", False))
    pairs, (source, target) = training_pairs(output, record["max_length"], protect)
    pieces = [piece for piece, _ in read_model(target.model_path)[1]]
    always = (pieces.index(PLACEHOLDER),) if protect and PLACEHOLDER in pieces else ()
    shortlist = Shortlist.learn(pairs, source.vocab_size, target.vocab_size, size, always=always)
    log(
        f"shortlist: {size} of {target.vocab_size} target pieces per request, learned from "
        f"{len(pairs)} training pairs"
    )
    return shortlist
