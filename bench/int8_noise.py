"""Is an int8 export's BLEU change the rounding's, or any perturbation's of
its size? A trained run's model translates its test split three ways, in
process, with the run's recorded search:

- float32, as trained;
- int8: `Translator.quantized()`, what `export --quantize int8` writes
  (weight-only, one abs-max scale per output channel, `quantize_array`);
- perturbed, `--draws` times: the float32 weights that int8 rounds, each
  moved by uniform noise in [-s/2, s/2] with its channel's int8 scale `s`
  (the rounding's own bound and, for a uniform spread, its own variance);
  the others untouched, each draw its own seed;
- with `--keep-float PART ...`: for each PART, the weights int8 rounds
  rounded (in float32, as `quantize_array` rounds them) except those whose
  path contains PART (`decoder`, `convolution`, `output_projection`, ...):
  how much of the change one group of layers accounts for.

Prints BLEU and chrF of each, each one's change from float32, how many
translations are identical to float32's, and the relative size of the
weight change (root of the summed squares over the float32 weights'),
then the perturbations' median and range. An int8 change inside that range
is what any change of the weights by the rounding's size does to this
model on this test set:

    python bench/int8_noise.py --run runs/demo [--draws 8] [--test FILE] \
        [--keep-float encoder decoder]
"""

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def rounded_weights(model):
    """`[(variable, reduced axes)]`: each float32 weight of `model` that
    int8 quantization rounds (`quantize_layers` on a copy says which
    layers), with the axes its per-channel scale reduces."""
    import keras

    from keras_attention.quantization import Int8Kernels, quantize_layers
    from keras_attention.serving.records import float_copy

    copy = float_copy(model)
    quantized = {id(layer) for layer in quantize_layers(copy)}
    # The copy's layers, in the same order as the model's (the same config).
    pairs = zip(
        model._flatten_layers(include_self=False, recursive=True),
        copy._flatten_layers(include_self=False, recursive=True),
    )
    found = []
    for layer, copied in pairs:
        if type(layer) is not type(copied):  # from_config built another model
            raise ValueError(f"the copy of {layer.path} is {type(copied).__name__}")
        if id(copied) not in quantized:
            continue
        if isinstance(layer, Int8Kernels):
            kernels = layer.int8_kernels()
        elif isinstance(layer, keras.layers.Embedding):
            kernels = {"embeddings": (1,)}  # one scale per row
        elif isinstance(layer, keras.layers.Dense):
            kernels = {"kernel": (0,)}  # one scale per output unit
        else:
            raise ValueError(f"{layer.path}: {type(layer).__name__} is quantized, not perturbed")
        found += [
            (getattr(layer, name), axes)
            for name, axes in kernels.items()
            if getattr(layer, name) is not None
        ]
    return found


def perturb(weights, seed):
    """Move each of `weights` (`rounded_weights`) by uniform noise in
    [-s/2, s/2], `s` its channel's int8 scale; returns the summed squares
    of the changes."""
    import numpy as np

    from keras_attention.quantization import quantize_array

    rng = np.random.default_rng(seed)
    change = 0.0
    for variable, axes in weights:
        values = np.asarray(variable.numpy(), dtype="float32")
        _, scale = quantize_array(values, axes)
        noise = rng.uniform(-0.5, 0.5, values.shape).astype("float32")
        noise *= np.expand_dims(scale, axes)
        variable.assign(values + noise)
        change += float(np.sum(noise.astype("float64") ** 2))
    return change


def round_weights(weights, keep=None):
    """Set each of `weights` to its int8 value in float32 (`q · s`), except
    those whose path contains `keep`; returns the summed squares of the
    changes."""
    import numpy as np

    from keras_attention.quantization import quantize_array

    change = 0.0
    for variable, axes in weights:
        if keep is not None and keep in variable.path:
            continue
        values = np.asarray(variable.numpy(), dtype="float32")
        q, scale = quantize_array(values, axes)
        rounded = q.astype("float32") * np.expand_dims(scale, axes)
        variable.assign(rounded)
        change += float(np.sum((rounded - values).astype("float64") ** 2))
    return change


def squares(weights):
    import numpy as np

    return sum(float(np.sum(np.asarray(v.numpy(), "float64") ** 2)) for v, _ in weights)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/demo", help="a trained run's folder")
    parser.add_argument("--test", help="a TSV test file (default: the run's test split)")
    parser.add_argument("--draws", type=int, default=8, help="perturbed copies (seeds 1..N)")
    parser.add_argument(
        "--keep-float",
        nargs="*",
        default=[],
        metavar="PART",
        help="also: int8 rounding with the weights whose path contains PART left float32",
    )
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error(f"--draws must be a positive number of perturbed copies; got {args.draws}")

    from keras_attention_recipes.translation.config import DECODING
    from keras_attention_recipes.translation.scores import corpus_scores
    from keras_attention_recipes.translation.text_io import read_pair_file
    from keras_attention_recipes.translation.trained_run import (
        load_run,
        number_protection,
        translator_for,
        upgrade_decoding,
    )

    from keras_attention.seq2seq.search import BeamSearch

    model, config, source, target = load_run(args.run, compile=False)
    test = args.test or os.path.join(args.run, "data", "test.tsv")
    pairs = read_pair_file(test, "--test")
    texts, references = [p[0] for p in pairs], [p[1] for p in pairs]
    recorded = upgrade_decoding(config.get("decoding"))
    search = BeamSearch(**{name: recorded[name] for name in DECODING if name in recorded})
    translator = translator_for(
        model, source, target, config["max_length"], search, numbers=number_protection(config)
    )
    weights = rounded_weights(model)
    original = [variable.numpy() for variable, _ in weights]
    norm = squares(weights)
    print(f"{args.run}: {len(texts)} sentences of {test}, {search!r}")
    print(f"{len(weights)} weights rounded by int8, {sum(v.size for v in original):,} values")

    baseline = translator.translate(texts)
    float32 = corpus_scores(baseline, references)

    def report(name, translations, change):
        scores = corpus_scores(translations, references)
        same = sum(a == b for a, b in zip(translations, baseline))
        deltas = (scores["bleu"] - float32["bleu"], scores["chrf"] - float32["chrf"])
        print(
            f"{name:12s} BLEU {scores['bleu']:6.2f} ({deltas[0]:+.2f})  chrF {scores['chrf']:6.2f} "
            f"({deltas[1]:+.2f})  identical {same}/{len(texts)}  weight change "
            f"{(change / norm) ** 0.5:.5f}"
        )
        return deltas

    report("float32", baseline, 0.0)
    int8 = translator.quantized().translate(texts)

    def restore():
        for (variable, _), values in zip(weights, original):
            variable.assign(values)

    report("int8", int8, round_weights(weights))
    restore()
    for part in args.keep_float:
        change = round_weights(weights, keep=part)
        report(f"int8 but {part}", translator.translate(texts), change)
        restore()
    drawn = []
    for seed in range(1, args.draws + 1):
        change = perturb(weights, seed)
        drawn.append(report(f"perturbed {seed}", translator.translate(texts), change))
        restore()
    for index, name in enumerate(("BLEU", "chrF")):
        values = [deltas[index] for deltas in drawn]
        print(
            f"perturbed, {name} change: median {statistics.median(values):+.2f}, "
            f"range {min(values):+.2f} to {max(values):+.2f} ({len(values)} draws)"
        )


if __name__ == "__main__":
    main()
