"""The tuning interface the recipes share (`recipes/tuning.py`) where it
needs no corpus: the translation recipe's searches are tested in
`tests/test_translation_training.py`, the digits recipe's in
`tests/test_recipe_digits.py`."""

import time


def test_a_chief_oracle_looks_for_its_finished_workers_every_second(monkeypatch):
    """KerasTuner's chief checks every 20 s whether a finished search's
    workers are gone; the recipe's chief checks every second."""
    from keras_attention_recipes import tuning
    from keras_tuner.src.distribute import oracle_chief

    monkeypatch.setattr(oracle_chief, "time", oracle_chief.time)  # restored afterwards
    assert tuning.end_chief_promptly()
    started = time.perf_counter()
    oracle_chief.time.sleep(20)
    assert 0.9 < time.perf_counter() - started < 5
    assert abs(oracle_chief.time.time() - time.time()) < 1  # the rest is `time`'s
