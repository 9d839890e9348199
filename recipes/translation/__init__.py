"""The translation recipe's parts below its command line (`recipes/translate.py`),
each importing only those listed before it.

- `settings`, `command_settings`, `config`: the settings in groups, each
  declared once with its tables (its flag, help, commands, bounds and
  choices), `TranslationConfig` with the one checker and the checks that
  span settings;
- `cluster`, `replicas`: the `TF_CONFIG` cluster, read and checked in one
  place; the replicas `train` fits on (`tf.distribute`, or Keras's
  distribution on JAX);
- `corpus`, `splits`, `shards`, `batches`, `pipeline`, `inputs`, `data`:
  corpora, the split, the shards and their batches on any backend
  (`ShardBatches`), the `tf.data` pipelines, a run's batches from either,
  vocabularies and number protection;
- `text_translator`: translations with the tokenizers' Python twins;
- `text_io`, `scores`: sentences in and out of files and pipes; BLEU and chrF;
- `trained_run`: `TrainedRun`, a trained run (alone or as an ensemble)
  opened once, its decoding settings settled in one place, and what it
  does: translate, evaluate, export;
- `averaging`, `budget`, `steps`, `distillation`: checkpoint averaging, the
  time budget, training in steps, sequence-level distillation;
- `model`, `callbacks`, `training`, `hyperparameter_search`, `members`,
  `workers`: building a run's model, its callbacks, training it, tuning,
  several members or workers at once;
- `commands`: evaluate, translate, average, tune, export, convert, demo.
"""
