"""Every setting of the translation recipe, declared once.

Each field of `Settings` carries its default, and in its metadata its flag's
help, the commands that take it, its check, its run record (the model's
settings, the data's, the decoding options), the families that have it and
its earlier name. The command line (`recipes/translate.py`), the checks
(`config.check_setting`) and the name lists (`config.MODEL_KEYS`, ...) are
made from them; `config.TranslationConfig` adds the behaviour. Example:

    FIELDS["alpha"].metadata["commands"]  # ('train', 'evaluate', 'translate', 'export', 'demo')
    FIELDS["alpha"].metadata["check"]     # {'low': 0, 'at_most': 10.0}
"""

import dataclasses

from .declare import (  # noqa: F401  (COMMANDS, CHECKS: read from here too)
    CHECKS,
    COMMANDS,
    DATA,
    DECODING_FLAGS,
    EVERY,
    MODEL,
    RUNS,
    SEARCHING,
    setting,
)
from .defaults import (
    ALGORITHMS,
    ATTENTION,
    CONVERSIONS,
    CT2_QUANTIZATIONS,
    DECAYS,
    FAMILIES,
    MAX_BATCH,
    MAX_BEAM,
    MAX_EPOCHS,
    MAX_LENGTH,
    MAX_LINE,
    MAX_MEMBERS,
    MAX_PAIRS,
    MAX_SEED,
    MAX_STEPS,
    MAX_TRIALS,
    MAX_UPDATE_FREQ,
    MAX_VOCABULARY,
    MAX_WIDTH,
    MAX_WORKERS,
    POSITIONS,
    PRECISIONS,
    PRESETS,
    QUANTIZATIONS,
    STYLES,
    TOKENIZERS,
)


@dataclasses.dataclass
class Settings:
    """Every setting of every command of the translation recipe, with its
    default; `None` for a model setting means "the family's default"
    (`family_default`), elsewhere "not given". Named as the model and
    search arguments they set."""

    command: str = "train"
    output: str = setting(
        "runs/translate",
        "the run's folder (data split, vocabularies, checkpoints, model)",
        EVERY,
        folder=True,
    )
    # data
    corpus: str = setting(
        None,
        f"a TSV file of source<TAB>target lines, or its gzip file; lines longer than {MAX_LINE} "
        "are skipped (default: Ding de-en)",
        DATA,
        records=("data",),
    )
    reverse: bool = setting(
        False, "swap the direction (Ding: English -> German)", DATA, records=("data",)
    )
    limit: int = setting(
        None,
        "use only the first N pairs of the corpus (default: all)",
        DATA,
        check="positive",
        at_most=MAX_PAIRS,
        records=("data",),
    )
    vocab_size: int = setting(
        8000,
        "subword vocabulary size target",
        DATA,
        check="positive",
        at_most=MAX_VOCABULARY,
        records=("data",),
    )
    tokenizer: str = setting(
        "sentencepiece",
        "subword vocabulary: SentencePiece (decodes to the exact input text) or WordPiece "
        "(loses where spaces were; the only one before this flag)",
        DATA,
        records=("data",),
        choices=list(TOKENIZERS),
    )
    vocab_sample: int = setting(
        200_000,
        "learn the vocabularies from a seeded sample of at most this many training pairs "
        "(sentences per side; a smaller split: all of it)",
        DATA,
        check="positive",
        at_most=MAX_PAIRS,
        records=("data",),
    )
    protect_numbers: bool = setting(
        True,
        "train on digit groups replaced by a placeholder, and copy the source's numbers into "
        "the translations",
        DATA,
        records=("data",),
    )
    batch_size: int = setting(64, "pairs per batch", DATA, check="positive", at_most=MAX_BATCH)
    batch_tokens: int = setting(
        None,
        "size batches by this many subword pieces per side instead of --batch-size (batches "
        "are bucketed by length either way)",
        DATA,
        check="positive",
        at_most=MAX_BATCH,
    )
    dictionary: float = setting(
        0.0,
        "Ding only: per epoch, add this many of the dictionary's word and phrase entries per "
        "sentence pair as training pairs (a new random draw each epoch; 0: off; at most "
        "{at_most})",
        DATA,
        check={"low": 0, "at_most": 100.0},
        records=("data",),
    )
    alternatives: bool = setting(
        False,
        "Ding only: also train on the other sentences of each training pair's entry (its `;` "
        "alternatives, every German one with every English one); validation and test are "
        "unchanged",
        DATA,
        records=("data",),
    )
    max_length: int = setting(
        32,
        "longest sentence in subword pieces (longer pairs are left out)",
        DATA,
        check="positive",
        at_most=MAX_LENGTH,
        records=("model",),
    )
    seed: int = setting(0, "random seed (0 to {at_most})", DATA, check="count", at_most=MAX_SEED)
    verbose: int = setting(
        None,
        "Keras fit verbosity (default: a progress bar on a terminal, else a line per epoch)",
        DATA,
        choices=[0, 1, 2],
    )
    overwrite: bool = setting(
        False,
        "delete what an earlier run wrote in --output and start again",
        (*DATA, "convert"),
        help_for={"convert": "replace OUT if it exists (atomically)"},
    )
    # model
    preset: str = setting(  # applied by `TranslationConfig.for_command`
        None,
        "the Transformer base or big of 'Attention Is All You Need': sets --family "
        "transformer, --num-layers 6, --hidden-dim 512|1024, --num-heads 8|16, "
        "--intermediate-dim 2048|4096, --dropout 0.1|0.3, --vocab-size 32000, "
        "--shared-vocabulary, --tie-embeddings, --label-smoothing 0.1, --warmup 4000, "
        "--decay rsqrt and --learning-rate d^-0.5 * w^-0.5 (the paper's schedule's peak, "
        "of the --hidden-dim d and --warmup w used, also when given); a flag given wins",
        MODEL,
        choices=list(PRESETS),
    )
    family: str = setting(
        "transformer", "the model family", MODEL, records=("model",), choices=FAMILIES
    )
    attention: str = setting(
        None,
        "the recurrent model's attention ('none': the bottleneck baseline; default: general)",
        MODEL,
        records=("model",),
        choices=ATTENTION,
    )
    style: str = setting(
        "luong",
        "where the recurrent decoder applies attention",
        MODEL,
        records=("model",),
        choices=STYLES,
    )
    embed_dim: int = setting(
        None,
        "embedding width (default: {family_default}; rnn and convs2s only: the transformer's "
        "is --hidden-dim)",
        MODEL,
        check="positive",
        at_most=MAX_WIDTH,
        records=("model",),
        families=("rnn", "convs2s"),
        family_default=128,
    )
    hidden_dim: int = setting(
        256,
        "hidden width",
        MODEL,
        check="positive",
        at_most=MAX_WIDTH,
        records=("model",),
        old="units",
    )
    num_layers: int = setting(
        2,
        "layers per stack",
        MODEL,
        check="positive",
        at_most=1000,  # a 1000-layer stack is far deeper than any translation model's
        records=("model",),
        old="layers",
    )
    num_heads: int = setting(
        None,
        "attention heads (default: {family_default}; transformer only)",
        MODEL,
        check="positive",
        at_most=MAX_WIDTH,
        records=("model",),
        families=("transformer",),
        family_default=4,
        old="heads",
    )
    intermediate_dim: int = setting(
        None,
        "the feed-forward width of each layer (default: 2 * --hidden-dim; transformer only)",
        MODEL,
        check="positive",
        at_most=4 * MAX_WIDTH,  # the paper's 4 * d_model
        records=("model",),
        families=("transformer",),
        family_default=None,  # 2 * hidden_dim (`config.model_settings`)
    )
    position: str = setting(
        None,
        "how the transformer places tokens: added to the embeddings (sinusoidal, learned) or "
        "in every self-attention (rope, alibi, relative) (default: {family_default}; "
        "transformer only)",
        MODEL,
        records=("model",),
        families=("transformer",),
        family_default="sinusoidal",  # the paper's, and what runs before --position had
        choices=POSITIONS,
    )
    num_key_value_heads: int = setting(
        None,
        "key/value heads, dividing --num-heads: grouped-query attention (1: multi-query; "
        "default: one per head; transformer only)",
        MODEL,
        check="positive",
        at_most=MAX_WIDTH,
        records=("model",),
        families=("transformer",),
        family_default=None,  # one key/value head per query head
        old="kv_heads",
    )
    sliding_window: int = setting(
        None,
        "sliding window w: each self-attention sees positions less than w away, as Keras's "
        "sliding_window (default: all; transformer only)",
        MODEL,
        check="positive",
        at_most=MAX_LENGTH + 1,  # sees every position of the longest sentence
        records=("model",),
        families=("transformer",),
        family_default=None,  # self-attention sees every position
        old="window",
    )
    dropout: float = setting(0.1, "in [0, 1)", MODEL, check="fraction", records=("model",))
    learning_rate: float = setting(
        1e-3,
        "Adam's learning rate (> 0)",
        MODEL,
        # no upper bound: a rate too large (even inf in float32) makes training
        # diverge, which stops it with one error line and keeps nothing
        # (`training._check_finite`); no integer is made of it
        check={"low": 0, "low_included": False},
        records=("model",),
    )
    label_smoothing: float = setting(0.1, "in [0, 1)", MODEL, check="fraction", records=("model",))
    word_dropout: float = setting(  # applied by `data.make_dataset`
        0.0,
        "training only: replace each source piece and each piece of the decoder's input by "
        "[UNK] with this probability, in [0, 1) (default: 0)",
        MODEL,
        check="fraction",
        records=("model",),
    )
    subword_sampling: float = setting(
        0.0,
        "training only (SentencePiece): segment each training sentence anew every epoch, "
        "drawing a segmentation with probability proportional to P(segmentation)^ALPHA "
        "(subword regularization; e.g. 0.3, at most {at_most}; default 0: the best)",
        MODEL,
        check={"low": 0, "at_most": 10.0},
        records=("model",),
        metavar="ALPHA",
    )
    # training
    epochs: int = setting(
        10,
        "epochs to train (with --time-budget: the most)",
        (*MODEL, "tune"),
        check="positive",
        at_most=MAX_EPOCHS,
        help_for={"tune": "most epochs a trial trains"},
    )
    update_freq: int = setting(  # Keras's gradient_accumulation_steps (`model.build_model`)
        1,
        "update the weights once every K batches, with the mean of their gradients "
        "(gradient accumulation: the batch of an update is K batches, in the memory of one); "
        "--warmup and the decay count updates; an interrupted run resumes with its own K. "
        "K is at most {at_most} and at most an epoch's batches (a larger K is refused "
        "before training starts: it would train an epoch without an update); the batches "
        "after the run's last full K, fewer than K, make no update, and training says so",
        MODEL,
        check="positive",
        at_most=MAX_UPDATE_FREQ,
        records=("model",),
        metavar="K",
    )
    time_budget: float = setting(  # minutes (`budget.py`); None or 0: --epochs decide
        None,
        "train for at most this many minutes: the epochs, the cosine decay's end and "
        "averaging follow the clock (the run records how many epochs fit); 0: no budget, "
        "--epochs decide (at most {at_most}, a year; the demo's default is 8)",
        MODEL,
        # a year: `--time-budget 1e308` trained an epoch, then ended in
        # "cannot convert float NaN to integer"
        check={"low": 0, "at_most": 60 * 24 * 365},
        metavar="MINUTES",
    )
    warmup: int = setting(
        0,
        "learning-rate warm-up steps, then --decay (--learning-rate is the peak; 0 with "
        "rsqrt: a constant rate); a step is an optimizer update (--update-freq batches)",
        MODEL,
        check="count",
        at_most=MAX_STEPS,
        records=("model",),
    )
    decay: str = setting(
        "rsqrt",
        "the rate after the warm-up: as 1/sqrt(step), or along a cosine to 0 at the last "
        "step of --epochs",
        MODEL,
        records=("model",),
        choices=DECAYS,
    )
    tie_embeddings: bool = setting(
        None,
        "the output projection is the target embedding table (transformer and convs2s)",
        MODEL,
        records=("model",),
        families=("transformer", "convs2s"),
        family_default=False,
    )
    shared_vocabulary: bool = setting(  # a data setting too: the encoder reads the decoder's table
        None,
        "one vocabulary learned from both sides, and one embedding table that the encoder "
        "and decoder share (with --tie-embeddings: three-way tying; transformer and convs2s)",
        MODEL,
        records=("model", "data"),
        families=("transformer", "convs2s"),
        family_default=False,  # a vocabulary of each side, and an embedding table of each
    )
    save_every: int = setting(  # the backup's steps (`runs.resilient_backup`), not the model's
        0,
        "back the run up every N training steps as well as at each epoch end: a killed run "
        "resumes from the last backup mid-epoch, without training again the batches done; "
        "with --average-last, the last backups are the checkpoints averaged "
        "(0: at epoch ends only)",
        MODEL,
        check="count",
        at_most=MAX_STEPS,
        metavar="STEPS",
    )
    validate_every: int = setting(  # `steps.StepValidation`
        0,
        "every N training steps, validation loss (on the first validation batches) and greedy "
        "BLEU (on the first --bleu-sentences validation pairs), logged, in "
        "validation_steps.jsonl and in TensorBoard (logs/steps) (0: at epoch ends only)",
        MODEL,
        check="count",
        at_most=MAX_STEPS,
        metavar="STEPS",
    )
    patience: int = setting(
        None,
        "stop after this many epochs without a better validation loss (the best epoch's "
        "weights are kept either way)",
        MODEL,
        check="positive",
        at_most=MAX_EPOCHS,
    )
    hyperparameters: str = setting(None, "best_hyperparameters.json from `tune`", MODEL)
    mixed_precision: str = setting(
        None,
        "compute in this precision (variables stay float32)",
        MODEL,
        choices=PRECISIONS,
    )
    jit: bool = setting(False, "compile training with XLA", MODEL)
    valid: str = setting(
        None,
        "validate on this TSV file of source<TAB>target lines instead of the split (lines "
        f"longer than {MAX_LINE} are skipped)",
        ("train", "average"),
        help_for={
            "average": f"report validation loss on this TSV file (lines longer than {MAX_LINE} "
            "are skipped)"
        },
        metavar="FILE",
    )
    bleu_every: int = setting(
        0,
        "validation BLEU (greedy) every K epochs, logged as val_bleu (0: off)",
        ("train",),
        check="count",
        at_most=MAX_EPOCHS,
    )
    bleu_sentences: int = setting(
        200,
        "validation pairs --bleu-every translates",
        ("train",),
        check="positive",
        at_most=MAX_PAIRS,
    )
    average_last: int = setting(  # 1 would average one epoch
        None,
        "keep the last N epochs' weights (checkpoints/) and save their mean as the model "
        "(with --save-every: the last N backups')",
        ("train",),
        check={"integer": True, "low": 2, "at_most": MAX_EPOCHS},
    )
    members: int = setting(  # models trained at once, one process each (`members.py`)
        1,
        "train N models at once (seeds --seed, --seed + 1, ...), one process each on its "
        "share of the cores: the first in --output, the others in --output/members/K, all "
        "of one vocabulary, for --ensemble (default 1; at most {at_most})",
        ("train",),
        check={
            "integer": True,
            "low": 1,
            "at_most": MAX_MEMBERS,
            "why": "each member is a TensorFlow process of its own, all started at once",
        },
    )
    workers: int = setting(  # one model, several processes (`workers.py`); not recorded
        1,
        "train one model in N worker processes of this machine, each on its share of the "
        "cores: a MultiWorkerMirroredStrategy cluster on loopback, as TF_CONFIG makes one "
        "across machines; --batch-size/--batch-tokens stay the global batch, split among "
        "the workers (default: 1, one process; at most {at_most})",
        ("train",),
        check={
            "integer": True,
            "low": 1,
            "at_most": MAX_WORKERS,
            "why": "each worker is a TensorFlow process of its own, all started at once",
        },
    )
    distill_from: list = setting(
        None,
        "train on these trained runs' translations of the training split instead of its "
        "references (sequence-level distillation; several runs translate as an ensemble); "
        "the run takes their data split and vocabularies",
        MODEL,
        nargs="+",
        metavar="RUN",
    )
    ensemble: list = setting(
        None,
        "decode with these runs' models and --output's as one: each step's next-piece "
        "probabilities averaged (seq2seq.Ensemble); every run needs --output's vocabulary "
        "files (train them with the same data settings)",
        RUNS,
        nargs="+",
        metavar="RUN",
    )
    # decoding (`decoding.search_from_config`); None: not given, so the run's
    # recorded setting (`config.run_decoding`), else BeamSearch's own
    # (`BEAM_DEFAULTS`); every one of BeamSearch's decoding options is here.
    beam_width: int = setting(
        None,
        "beam search width",
        SEARCHING,
        check="positive",
        at_most=MAX_BEAM,
        records=("decoding",),
        help_for={"export": "beam width of serving_default and nbest"},
    )
    alpha: float = setting(
        None,
        "GNMT's length penalty of beam search: hypotheses are ranked by "
        "log p / ((5 + length) / 6)^alpha (0 to {at_most}; 0: the plain sum)",
        SEARCHING,
        check={"low": 0, "at_most": 10.0},
        records=("decoding",),
    )
    min_length: int = setting(
        None,
        "at least this many target pieces before the end (>= 0)",
        DECODING_FLAGS,
        check="count",
        at_most=MAX_LENGTH,
        records=("decoding",),
    )
    no_repeat_ngram_size: int = setting(
        None,
        "never repeat an n-gram of this many pieces (0: off)",
        DECODING_FLAGS,
        check="count",
        at_most=MAX_LENGTH,
        records=("decoding",),
        old="no_repeat_ngram",
    )
    repetition_penalty: float = setting(
        None,
        "CTRL's penalty on pieces already generated (0.01 to {at_most}; 1: off)",
        DECODING_FLAGS,
        # 1e-300 is 0 in float32: a division by it
        check={"low": 0.01, "at_most": 100.0},
        records=("decoding",),
    )
    coverage_penalty: float = setting(
        None,
        "GNMT's coverage penalty beta of beam search (0 to {at_most}; 0: off)",
        DECODING_FLAGS,
        check={"low": 0, "at_most": 10.0},
        records=("decoding",),
    )
    # evaluate, translate, export, average
    samples: int = setting(
        5,
        "sample translations and heatmaps shown",
        ("evaluate",),
        check="count",
        at_most=MAX_PAIRS,
    )
    limit_test: int = setting(
        None,
        "evaluate only the first N test sentences",
        ("evaluate", "demo"),
        check="positive",
        at_most=MAX_PAIRS,
        help_for={"demo": "evaluate only the first N test sentences (default: all)"},
    )
    test: str = setting(
        None,
        "score this TSV file of source<TAB>target lines instead of the test split (lines "
        f"longer than {MAX_LINE} are skipped)",
        ("evaluate",),
        metavar="FILE",
    )
    nbest: int = setting(
        None,
        "print the N best hypotheses of each sentence instead: N lines per sentence, "
        "sentences in order, best first, each `score<TAB>translation` (score: "
        "log-probability over the length penalty, plus the coverage penalty; an unfilled "
        "slot is -1000000000.0 and empty); N <= --beam-width",
        ("translate",),
        check="positive",
        at_most=MAX_BEAM,
        aliases=("--num-hypotheses",),
    )
    input: str = setting(
        None,
        "translate the lines of FILE (-: standard input, also read when it is not a terminal "
        f"and no text is given): a line out for each line in; a line longer than {MAX_LINE} "
        "is refused",
        ("translate",),
        metavar="FILE",
    )
    output_file: str = setting(
        None,
        "write the translations there, a line each, atomically (default: stdout)",
        ("translate",),
        metavar="FILE",
    )
    text: list = setting(
        help="the sentences to translate",
        commands=("translate",),
        factory=list,
        positional=True,
        nargs="*",
    )
    checkpoints: list = setting(
        None,
        ".weights.h5 files of the run's model",
        ("average",),
        nargs="+",
        metavar="FILE",
        exclusive="checkpoints",
    )
    last: int = setting(
        None,
        "the last N epoch (or step) checkpoints train --average-last kept (N >= 2, as "
        "--average-last: one checkpoint is no mean)",
        ("average",),
        check={"integer": True, "low": 2, "at_most": MAX_EPOCHS},
        exclusive="checkpoints",
    )
    export_dir: str = setting(
        "saved_models",
        "base directory: <dir>/<name>/<version>/",
        ("export",),
        folder=True,
    )
    model_name: str = setting("translator", "the served model's name", ("export",))
    num_hypotheses: int = setting(
        None,
        "hypotheses the nbest signature returns (default: --beam-width; at most that)",
        ("export",),
        check="positive",
        at_most=MAX_BEAM,
    )
    quantize: str = setting(
        None,
        "export a weight-only int8 copy of the model (per-channel float scales, float32 "
        "arithmetic; variables/ about 4x smaller; the run's model is kept; default: float32)",
        ("export",),
        metavar="{" + ",".join(QUANTIZATIONS) + "}",
    )
    xla: bool = setting(
        False, "XLA-compiled searches (serve with --xla_cpu_compilation_enabled=true)", ("export",)
    )
    # convert
    to: str = setting(
        None, "the runtime to convert for", ("convert",), choices=CONVERSIONS, required=True
    )
    dir: str = setting(
        None,
        "the model folder to write (with the run's source.spm and target.spm)",
        ("convert",),
        folder=True,
        metavar="OUT",
        required=True,
    )
    quantization: str = setting(
        None,
        "CTranslate2's weight type (default: float32)",
        ("convert",),
        choices=CT2_QUANTIZATIONS,
    )
    # tune
    algorithm: str = setting("hyperband", "the search algorithm", ("tune",), choices=ALGORITHMS)
    trials: int = setting(
        10, "trials for bayesian/random", ("tune",), check="positive", at_most=MAX_TRIALS
    )
    families: list = setting(
        help="families searched",
        commands=("tune",),
        factory=lambda: list(FAMILIES),
        nargs="+",
        choices=FAMILIES,
    )
    bleu_trials: int = setting(
        3, "report validation BLEU of the N best", ("tune",), check="count", at_most=MAX_TRIALS
    )
    # Not a setting: the --output run's config.json as read to settle the decoding
    # settings (`translate.check`), so that `load_run` need not; None: not read.
    recorded: dict = dataclasses.field(default=None, repr=False, compare=False)


FIELDS = {field.name: field for field in dataclasses.fields(Settings)}
