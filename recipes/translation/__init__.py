"""The translation recipe's parts below its command line (`recipes/translate.py`),
each importing only those listed before it.

- `defaults`, `declare`, `settings`, `config`: the tables, every setting
  declared once (its flag, help, commands and check), `TranslationConfig`
  and the checks that span settings;
- `cluster`: the `TF_CONFIG` cluster, read and checked in one place;
- `corpus`, `splits`, `pipeline`, `data`: corpora, the split, the `tf.data`
  pipelines, vocabularies and number protection;
- `text_io`: sentences in and out of files and pipes;
- `decoding`: every search, translation and the export;
- `trained_run`: reading a trained run back (its model, alone or as an
  ensemble, and the checks that runs decode as one);
- `averaging`, `scores`, `budget`, `distillation`: checkpoint averaging,
  BLEU and chrF, the time budget, sequence-level distillation;
- `model`, `training`, `hyperparameter_search`, `members`: building and
  training a run's model, tuning, several members at once;
- `commands`: evaluate, translate, average, tune, export, convert, demo.
"""
