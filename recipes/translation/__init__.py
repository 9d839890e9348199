"""The translation recipe's parts below its command line (`recipes/translate.py`).

- `config`: `TranslationConfig`, every setting's default and check;
- `data`: corpora, the split, vocabularies and `tf.data` pipelines;
- `text_io`: sentences in and out of files and pipes;
- `trained_run`: reading a trained run back (its model, alone or as an
  ensemble, and the checks that runs decode as one);
- `training`: building and training a run's model;
- `averaging`: checkpoint averaging;
- `decoding`: every search, translation and the export;
- `scores`: BLEU, chrF, validation BLEU, BLEU by source length;
- `commands`: evaluate, translate, average, tune, export, demo.
"""
