"""Train, evaluate, tune and use translation models built from keras_attention.

    keras-attention-translate train --family transformer         # Ding corpus, German -> English
    keras-attention-translate train --family rnn --attention additive --epochs 8
    keras-attention-translate evaluate --output runs/translate   # BLEU, chrF, samples, heatmaps
    keras-attention-translate translate --output runs/translate "Ich habe keine Zeit."
    keras-attention-translate translate --output runs/translate < de.txt > en.txt  # a line each
    keras-attention-translate average --output runs/translate --last 5   # checkpoint averaging
    keras-attention-translate tune --output runs/tune            # KerasTuner (resumable)
    keras-attention-translate convert --output runs/translate --to ctranslate2 --dir ct2_model
    keras-attention-translate demo                               # what `make demo` runs

Data: the German-English sentences of Debian's `trans-de-en` by default
(`--reverse` for English -> German), or `--corpus FILE.tsv` with
`source<TAB>target` lines. A run keeps everything in `--output`: the data
split, the vocabularies (SentencePiece models `source.spm`, `target.spm`;
`--tokenizer wordpiece`: `source.vocab`, `target.vocab`), `config.json`, checkpoints and
TensorBoard logs (`logs/`), and the trained model (`model.keras`).
Training resumes from its last epoch when re-run after an interruption.

Hardware: every visible GPU is used through `MirroredStrategy`, several
machines through `MultiWorkerMirroredStrategy` when `TF_CONFIG` is set;
`--mixed-precision bfloat16|float16` and `--jit` (XLA) are opt-in; the same
commands run on a CPU.
"""

import argparse
import sys

# Nothing here imports TensorFlow or Keras: the arguments are parsed first
# (`--help` and a mistyped flag answer at once), then `main` imports them.
from .runs import HelpFormatter, import_tensorflow_quietly
from .translation.config import (
    ALGORITHMS,
    ATTENTION,
    BEAM_DEFAULTS,
    CONVERSIONS,
    CT2_QUANTIZATIONS,
    DECAYS,
    DECODING,
    DECODING_RENAMED,
    FAMILIES,
    FAMILY_DEFAULTS,
    MAX_MEMBERS,
    POSITIONS,
    PRECISIONS,
    QUANTIZATIONS,
    RENAMED,
    STYLES,
    TOKENIZERS,
    UPPER_BOUNDS,
    TranslationConfig,
    UsageError,
)
from .translation.data import CorpusError
from .translation.trained_run import with_run_decoding


def decoding_default(name, run):
    """How a decoding flag's default is said: `train` records the flags in
    the run (`run="records"`), evaluate, translate and export use the run's
    (`run="uses"`); the demo has defaults of its own (None)."""
    default = BEAM_DEFAULTS[name]
    if run == "records":
        return (
            f" (default: {default}; recorded in the run as what evaluate, translate and export use)"
        )
    if run == "uses":
        return f" (default: the run's, recorded when it trained; else {default})"
    return ""


def add_beam_width_flag(command, run, help_text="beam search width"):
    command.add_argument(
        "--beam-width", type=int, help=help_text + decoding_default("beam_width", run)
    )


# The help of each decoding flag but --beam-width (whose help each command
# words): every decoding option of BeamSearch (`BEAM_DEFAULTS`) needs one.
DECODING_HELP = {
    "alpha": "GNMT's length penalty of beam search: hypotheses are ranked by "
    "log p / ((5 + length) / 6)^alpha (0 to 10; 0: the plain sum)",
    "min_length": "at least this many target pieces before the end (>= 0)",
    "no_repeat_ngram_size": "never repeat an n-gram of this many pieces (0: off)",
    "repetition_penalty": "CTRL's penalty on pieces already generated (0.01 to 100; 1: off)",
    "coverage_penalty": "GNMT's coverage penalty beta of beam search (0 to 10; 0: off)",
}


def add_decoding_flag(command, name, run):
    """The flag of decoding option `name` (`--no-repeat-ngram-size` for
    `no_repeat_ngram_size`), typed as its default."""
    command.add_argument(
        "--" + name.replace("_", "-"),
        type=type(BEAM_DEFAULTS[name]),
        help=DECODING_HELP[name] + decoding_default(name, run),
    )


def add_alpha_flag(command, run=None):
    """`--alpha`, beam search's length penalty, for every command that
    searches (the demo's default is larger: RESULTS.md)."""
    add_decoding_flag(command, "alpha", run)


def add_decoding_flags(command, run):
    """The decoding options of `train` (recorded), `translate` and `export`:
    one flag for each of `BEAM_DEFAULTS` but the beam width."""
    for name in DECODING:
        if name != "beam_width":
            add_decoding_flag(command, name, run)


def add_distill_flag(command):
    """`--distill-from` (train and demo: `tune` searches on the references)."""
    command.add_argument(
        "--distill-from",
        nargs="+",
        metavar="RUN",
        help="train on these trained runs' translations of the training split instead "
        "of its references (sequence-level distillation; several runs translate as "
        "an ensemble); the run takes their data split and vocabularies",
    )


def add_training_flags(command):
    """`train`'s flags for validation, monitoring and averaging, and its
    members."""
    command.add_argument(
        "--valid",
        metavar="FILE",
        help="validate on this TSV file of source<TAB>target lines instead of the split",
    )
    command.add_argument(
        "--bleu-every",
        type=int,
        help="validation BLEU (greedy) every K epochs, logged as val_bleu (0: off)",
    )
    command.add_argument(
        "--bleu-sentences", type=int, help="validation pairs --bleu-every translates"
    )
    command.add_argument(
        "--average-last",
        type=int,
        help="keep the last N epochs' weights (checkpoints/) and save their mean as the model",
    )
    command.add_argument(
        "--members",
        type=int,
        help="train N models at once (seeds --seed, --seed + 1, ...), one process each on "
        "its share of the cores: the first in --output, the others in --output/members/K, "
        f"all of one vocabulary, for --ensemble (default 1; at most {MAX_MEMBERS})",
    )


class DeprecatedFlag(argparse.Action):
    """An old spelling of a flag (0.2.0's `--kv-heads` for
    `--num-key-value-heads`): sets the same setting, says so on stderr in
    one line, and is hidden from `--help`."""

    def __init__(self, option_strings, dest, new=None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"note: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def deprecated_aliases(commands):
    """Give every command that has a renamed flag (`RENAMED`,
    `DECODING_RENAMED`) its old spelling."""
    for command in commands.choices.values():
        flags = {action.dest: action for action in command._actions}
        for old, new in {**RENAMED, **DECODING_RENAMED}.items():
            if new in flags:
                command.add_argument(
                    f"--{old.replace('_', '-')}",
                    dest=new,
                    type=flags[new].type,
                    action=DeprecatedFlag,
                    new=flags[new].option_strings[0],
                    default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS,
                )


def command_defaults(commands):
    """Each flag's default is its command's `TranslationConfig` default
    (`TranslationConfig.for_command`), not restated here; flags whose
    absence means "the family's default" stay unset (`argparse.SUPPRESS`)."""
    for name, command in commands.choices.items():
        defaults = TranslationConfig.for_command(name)
        for action in command._actions:
            if action.default is not argparse.SUPPRESS and hasattr(defaults, action.dest):
                action.default = getattr(defaults, action.dest)
        command.set_defaults(command=name)


def parser():
    main = argparse.ArgumentParser(
        prog="keras-attention-translate", description=__doc__, formatter_class=HelpFormatter
    )
    commands = main.add_subparsers(dest="command", required=True)

    def add(name, help_text, data=True, model=True):
        command = commands.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        command.add_argument(
            "--output",
            help="the run's folder (data split, vocabularies, checkpoints, model)",
        )
        if data:
            command.add_argument(
                "--corpus", help="a TSV file of source<TAB>target lines (default: Ding de-en)"
            )
            command.add_argument(
                "--reverse",
                action="store_true",
                help="swap the direction (Ding: English -> German)",
            )
            command.add_argument(
                "--limit", type=int, help="use only the first N pairs of the corpus (default: all)"
            )
            command.add_argument("--vocab-size", type=int, help="subword vocabulary size target")
            command.add_argument(
                "--tokenizer",
                choices=list(TOKENIZERS),
                help="subword vocabulary: SentencePiece (decodes to the exact input text) "
                "or WordPiece (loses where spaces were; the only one before this flag)",
            )
            command.add_argument(
                "--protect-numbers",
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help="train on digit groups replaced by a placeholder, and copy the source's "
                "numbers into the translations (default: on)",
            )
            command.add_argument("--batch-size", type=int, help="pairs per batch")
            command.add_argument(
                "--batch-tokens",
                type=int,
                help="size batches by this many subword pieces per side instead of --batch-size "
                "(batches are bucketed by length either way)",
            )
            command.add_argument(
                "--dictionary",
                type=float,
                help="Ding only: per epoch, add this many of the dictionary's word and phrase "
                "entries per sentence pair as training pairs (a new random draw each epoch; "
                "0: off; at most 100)",
            )
            command.add_argument(
                "--alternatives",
                action="store_true",
                default=argparse.SUPPRESS,
                help="Ding only: also train on the other sentences of each training pair's "
                "entry (its `;` alternatives, every German one with every English one); "
                "validation and test are unchanged",
            )
            command.add_argument(
                "--max-length",
                type=int,
                help="longest sentence in subword pieces (longer pairs are left out)",
            )
            command.add_argument("--seed", type=int, help="random seed")
            command.add_argument(
                "--verbose",
                type=int,
                choices=[0, 1, 2],
                help="Keras fit verbosity (default: a progress bar on a terminal, else a line "
                "per epoch)",
            )
            command.add_argument(
                "--overwrite",
                action="store_true",
                help="delete what an earlier run wrote in --output and start again",
            )
        if model:
            command.add_argument("--family", choices=FAMILIES, help="the model family")
            command.add_argument(
                "--attention",
                choices=ATTENTION,
                help="the recurrent model's attention ('none': the bottleneck baseline; "
                "default: general)",
            )
            command.add_argument(
                "--style",
                choices=STYLES,
                help="where the recurrent decoder applies attention",
            )
            command.add_argument(
                "--embed-dim",
                type=int,
                default=argparse.SUPPRESS,
                help=f"embedding width (default: {FAMILY_DEFAULTS['embed_dim']}; rnn and convs2s "
                "only: the transformer's is --hidden-dim)",
            )
            command.add_argument("--hidden-dim", type=int, help="hidden width")
            command.add_argument("--num-layers", type=int, help="layers per stack")
            command.add_argument(
                "--num-heads",
                type=int,
                default=argparse.SUPPRESS,
                help=f"attention heads (default: {FAMILY_DEFAULTS['num_heads']}; transformer only)",
            )
            command.add_argument(
                "--position",
                choices=POSITIONS,
                default=argparse.SUPPRESS,
                help=f"how the transformer places tokens: added to the embeddings (sinusoidal, "
                f"learned) or in every self-attention (rope, alibi, relative) (default: "
                f"{FAMILY_DEFAULTS['position']}; transformer only)",
            )
            command.add_argument(
                "--num-key-value-heads",
                type=int,
                default=argparse.SUPPRESS,
                help="key/value heads, dividing --num-heads: grouped-query attention "
                "(1: multi-query; "
                "default: one per head; transformer only)",
            )
            command.add_argument(
                "--sliding-window",
                type=int,
                default=argparse.SUPPRESS,
                help="sliding window w: each self-attention sees positions less than w away, "
                "as Keras's sliding_window (default: all; transformer only)",
            )
            command.add_argument("--dropout", type=float, help="in [0, 1)")
            command.add_argument(
                "--learning-rate",
                type=float,
                help="Adam's learning rate (> 0)",
            )
            command.add_argument(
                "--label-smoothing",
                type=float,
                help="in [0, 1)",
            )
            command.add_argument(
                "--word-dropout",
                type=float,
                help="training only: replace each source piece and each piece of the "
                "decoder's input by [UNK] with this probability, in [0, 1) (default: 0)",
            )
            command.add_argument(
                "--subword-sampling",
                type=float,
                metavar="ALPHA",
                help="training only (SentencePiece): segment each training sentence anew "
                "every epoch, drawing a segmentation with probability proportional to "
                "P(segmentation)^ALPHA (subword regularization; e.g. 0.3, at most 10; "
                "default 0: the best)",
            )
            command.add_argument(
                "--epochs", type=int, help="epochs to train (with --time-budget: the most)"
            )
            command.add_argument(
                "--time-budget",
                type=float,
                metavar="MINUTES",
                help="train for at most this many minutes: the epochs, the cosine decay's end "
                "and averaging follow the clock (the run records how many epochs fit); "
                f"0: no budget, --epochs decide (at most {UPPER_BOUNDS['time_budget']}, a "
                "year; the demo's default is 8)",
            )
            command.add_argument(
                "--warmup",
                type=int,
                help="learning-rate warm-up steps, then --decay "
                "(--learning-rate is the peak; 0 with rsqrt: a constant rate)",
            )
            command.add_argument(
                "--decay",
                choices=DECAYS,
                help="the rate after the warm-up: as 1/sqrt(step), or along a cosine "
                "to 0 at the last step of --epochs",
            )
            command.add_argument(
                "--tie-embeddings",
                action="store_true",
                default=argparse.SUPPRESS,
                help="the output projection is the target embedding table "
                "(transformer and convs2s)",
            )
            command.add_argument(
                "--shared-vocabulary",
                action="store_true",
                default=argparse.SUPPRESS,
                help="one vocabulary learned from both sides, and one embedding table that the "
                "encoder and decoder share (with --tie-embeddings: three-way tying; "
                "transformer and convs2s)",
            )
            command.add_argument(
                "--patience",
                type=int,
                help="stop after this many epochs without a better validation loss "
                "(the best epoch's weights are kept either way)",
            )
            command.add_argument("--hyperparameters", help="best_hyperparameters.json from `tune`")
            command.add_argument(
                "--mixed-precision",
                choices=PRECISIONS,
                help="compute in this precision (variables stay float32)",
            )
            command.add_argument("--jit", action="store_true", help="compile training with XLA")
        return command

    train_command = add("train", "train a model")
    add_training_flags(train_command)
    add_distill_flag(train_command)
    add_beam_width_flag(train_command, "records")
    add_decoding_flags(train_command, "records")
    for name, help_text in (
        ("evaluate", "BLEU/chrF on the test split, samples, attention heatmaps"),
        ("translate", "translate sentences with a trained model"),
    ):
        command = add(name, help_text, data=False, model=False)
        add_ensemble_flag(command)
        add_beam_width_flag(command, "uses")
        if name == "evaluate":
            add_alpha_flag(command, "uses")
            command.add_argument(
                "--samples", type=int, help="sample translations and heatmaps shown"
            )
            command.add_argument(
                "--limit-test", type=int, help="evaluate only the first N test sentences"
            )
            command.add_argument(
                "--test",
                metavar="FILE",
                help="score this TSV file of source<TAB>target lines instead of the test split",
            )
        else:
            add_decoding_flags(command, "uses")
            command.add_argument(
                "--nbest",
                "--num-hypotheses",
                dest="nbest",
                type=int,
                help="print the N best hypotheses of each sentence instead: N lines per "
                "sentence, sentences in order, best first, each `score<TAB>translation` "
                "(score: log-probability over the length penalty, plus the coverage "
                "penalty; an unfilled slot is -1000000000.0 and empty); N <= --beam-width",
            )
            command.add_argument(
                "--input",
                metavar="FILE",
                help="translate the lines of FILE (-: standard input, also read when it is "
                "not a terminal and no text is given): a line out for each line in",
            )
            command.add_argument(
                "--output-file",
                metavar="FILE",
                help="write the translations there, a line each, atomically (default: stdout)",
            )
            command.add_argument("text", nargs="*", help="the sentences to translate")
    average = add(
        "average", "replace the run's model by the mean of checkpoints", data=False, model=False
    )
    checkpoints = average.add_mutually_exclusive_group(required=True)
    checkpoints.add_argument(
        "--checkpoints", nargs="+", metavar="FILE", help=".weights.h5 files of the run's model"
    )
    checkpoints.add_argument("--last", type=int, help="the last N epochs train --average-last kept")
    average.add_argument("--valid", metavar="FILE", help="report validation loss on this TSV file")
    export = add(
        "export",
        "export the trained model as a SavedModel for TensorFlow Serving",
        data=False,
        model=False,
    )
    export.add_argument("--export-dir", help="base directory: <dir>/<name>/<version>/")
    export.add_argument("--model-name", help="the served model's name")
    add_ensemble_flag(export)
    add_beam_width_flag(export, "uses", "beam width of serving_default and nbest")
    export.add_argument(
        "--num-hypotheses",
        type=int,
        help="hypotheses the nbest signature returns (default: --beam-width; at most that)",
    )
    add_decoding_flags(export, "uses")
    export.add_argument(
        "--quantize",
        metavar="{" + ",".join(QUANTIZATIONS) + "}",
        help="export a weight-only int8 copy of the model: int8 weights with per-channel "
        "float scales, computed in float32 (variables/ about 4x smaller for the quantized "
        "layers; the run's model is not changed; default: float32)",
    )
    convert = add(
        "convert",
        "convert the trained model for another runtime: CTranslate2 (the Transformer family)",
        data=False,
        model=False,
    )
    convert.add_argument(
        "--to", choices=CONVERSIONS, required=True, help="the runtime to convert for"
    )
    convert.add_argument(
        "--dir",
        metavar="OUT",
        required=True,
        help="the model folder to write (with the run's source.spm and target.spm)",
    )
    convert.add_argument(
        "--quantization",
        choices=CT2_QUANTIZATIONS,
        help="CTranslate2's weight type (default: float32)",
    )
    convert.add_argument(
        "--overwrite", action="store_true", help="replace OUT if it exists (atomically)"
    )
    tune_command = add(
        "tune", "KerasTuner search (resumable; chief/worker distributed)", model=False
    )
    tune_command.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        help="the search algorithm",
    )
    tune_command.add_argument("--trials", type=int, help="trials for bayesian/random")
    tune_command.add_argument("--epochs", type=int, help="most epochs a trial trains")
    tune_command.add_argument("--families", nargs="+", choices=FAMILIES, help="families searched")
    tune_command.add_argument(
        "--bleu-trials", type=int, help="report validation BLEU of the N best"
    )
    demo_command = add("demo", "train, evaluate and translate: the main job of `make demo`")
    add_beam_width_flag(demo_command, "records")
    add_alpha_flag(demo_command)
    add_distill_flag(demo_command)
    demo_command.add_argument(
        "--limit-test", type=int, help="evaluate only the first N test sentences (default: all)"
    )
    deprecated_aliases(commands)
    command_defaults(commands)
    return main


def check(args):
    """The `TranslationConfig` of parsed arguments, validated (`UsageError`
    naming the flag): the one object the commands below the command line
    receive."""
    settings = {key: value for key, value in vars(args).items() if key != "command"}
    config = TranslationConfig.for_command(args.command, **settings).validate()
    return with_run_decoding(config)  # a decoding flag not given: the run's


def add_ensemble_flag(command):
    command.add_argument(
        "--ensemble",
        nargs="+",
        metavar="RUN",
        help="decode with these runs' models and --output's as one: each step's next-piece "
        "probabilities averaged (seq2seq.Ensemble); every run needs --output's vocabulary "
        "files (train them with the same data settings)",
    )


def run(args, log=print):
    """Run the parsed command: check its settings, then hand them over."""
    from .translation.commands import COMMANDS  # Keras and TensorFlow: not for --help

    return COMMANDS[args.command](check(args), log)


INTERRUPTED = {
    "export": "interrupted: nothing was kept (an export publishes only complete versions); "
    "run the export again",
    "evaluate": "interrupted: run the command again",
    "tune": "interrupted: re-run the same command to continue the search",
    "translate": "interrupted",
    "convert": "interrupted: nothing was written (the folder appears only when complete)",
}


def main(argv=None):
    """The command line: a user mistake, a bad corpus, a file that cannot be
    read or written, or a `ValueError` from the library is one `error:` line
    and exit status 2, never a traceback."""
    args = parser().parse_args(argv)
    import_tensorflow_quietly()  # before anything imports TensorFlow
    try:
        run(args)
    except (UsageError, CorpusError, ValueError, OSError) as error:
        print(
            f"error: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            file=sys.stderr,
        )
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(
            INTERRUPTED.get(
                args.command,
                "interrupted: re-run the same command to resume from the last completed epoch",
            )
        )


if __name__ == "__main__":
    main()
