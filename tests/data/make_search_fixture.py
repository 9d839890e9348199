"""Write `search_0_2_0.npz`: the outputs of keras_attention 0.2.0's
`greedy_search`, `beam_search`, `sample` and `generate` on tiny random models
of the three families, with the models' weights, for `tests/test_search.py`
(the search objects must reproduce them).

Run from a checkout of 0.2.0's generation code (the commit before the
search objects, 5d4ad2c):

    git archive 5d4ad2c keras_attention | tar -x -C /tmp/v020
    PYTHONPATH=/tmp/v020 KERAS_BACKEND=tensorflow python tests/data/make_search_fixture.py
"""

import os

import keras
import numpy as np

from keras_attention.seq2seq import ConvS2SSeq2Seq, RecurrentSeq2Seq, TransformerSeq2Seq
from keras_attention.seq2seq.generation import beam_search, generate, greedy_search, sample

SOURCE = np.array([[1, 4, 5, 6, 2, 0], [1, 7, 8, 9, 10, 2], [1, 3, 2, 0, 0, 0]], "int32")
PREFIX = np.array([[6, 0], [7, 4], [0, 0]], "int32")
OPTIONS = dict(min_length=2, no_repeat_ngram_size=2, repetition_penalty=1.3, suppress_tokens=[5])


def models():
    keras.utils.set_random_seed(11)
    return {
        "rnn": RecurrentSeq2Seq(12, 12, 8, 16, attention="additive", style="bahdanau"),
        "convs2s": ConvS2SSeq2Seq(12, 12, 8, max_length=10, hidden_dim=8, num_layers=2),
        "transformer": TransformerSeq2Seq(12, 12, 16, 2, 32, 2, max_length=10),
    }


CASES = {
    "greedy": lambda m: greedy_search(m, SOURCE, 7, return_attention=True, **OPTIONS),
    "greedy_prefix_unk": lambda m: greedy_search(
        m, SOURCE, 7, prefix=PREFIX, replace_unknown=True, unk_id=4
    ),
    "beam": lambda m: beam_search(m, SOURCE, 7, return_attention=True),
    "beam_options": lambda m: beam_search(
        m,
        SOURCE,
        7,
        beam_width=3,
        alpha=1.1,
        coverage_penalty=0.2,
        num_hypotheses=2,
        return_token_scores=True,
        prefix=PREFIX,
        **OPTIONS,
    ),
    "sample": lambda m: sample(m, SOURCE, 7, temperature=0.8, top_k=6, top_p=0.9, seed=3),
    "sample_options": lambda m: sample(m, SOURCE, 7, seed=5, return_attention=True, **OPTIONS),
    "generate_beam": lambda m: generate(m, SOURCE, 7, beam_width=3, alpha=1.2, **OPTIONS),
    "generate_greedy": lambda m: generate(m, SOURCE, 7, prefix=PREFIX),
}


def main():
    arrays = {}
    for family, model in models().items():
        model.build()
        for index, weight in enumerate(model.get_weights()):
            arrays[f"{family}/weight/{index}"] = weight
        for case, run in CASES.items():
            for key, value in run(model).items():
                arrays[f"{family}/{case}/{key}"] = np.asarray(value)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "search_0_2_0.npz")
    np.savez_compressed(path, **arrays)
    print(f"wrote {path}: {len(arrays)} arrays")


if __name__ == "__main__":
    main()
