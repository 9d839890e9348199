"""The tuning interface every recipe shares: KerasTuner search that resumes
after an interruption, a summary table, and the best hyperparameters as JSON.

A recipe passes a `build(hp) -> compiled keras.Model` and its data. The
search state lives in `<output>/tuning/<project>`; re-running the same
command continues it (`overwrite=False`). Distributed tuning uses
KerasTuner's own chief/worker mode: set `KERASTUNER_TUNER_ID`,
`KERASTUNER_ORACLE_IP` and `KERASTUNER_ORACLE_PORT` in each process.
"""

import contextlib
import inspect
import json
import os
import sys
import time

from . import runs

ALGORITHMS = ("hyperband", "bayesian", "random")


class _ShortSleeps:
    """`time` for KerasTuner's chief server loop, with sleeps of at most
    `most` seconds: once the search is over, the chief looks every 20 s for
    its workers to be gone (`oracle_chief.start_server`), so a finished
    distributed search ended up to 20 s after its last worker."""

    def __init__(self, most=1.0):
        self.most = most

    def sleep(self, seconds):
        time.sleep(min(seconds, self.most))

    def __getattr__(self, name):
        return getattr(time, name)


def end_chief_promptly():
    """Make a chief oracle's search return within a second of its last
    worker's end. A no-op (False) unless KerasTuner's chief server loop is
    the one this was written for (1.4: `time.sleep(20)` between checks)."""
    try:
        from keras_tuner.src.distribute import oracle_chief

        source = inspect.getsource(oracle_chief.start_server)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    if "time.sleep(20)" not in source or getattr(oracle_chief, "time", None) is not time:
        return False
    oracle_chief.time = _ShortSleeps()
    return True


def defaults_first(oracle_class):
    """A subclass of KerasTuner's `oracle_class` whose first trial takes
    every active hyperparameter's default (a search that starts from a
    known configuration, then searches as `oracle_class` does)."""
    from keras_tuner import HyperParameters

    class DefaultsFirst(oracle_class):
        def populate_space(self, trial_id):
            if self.trials:  # the first trial is not yet among them
                return super().populate_space(trial_id)
            chosen = HyperParameters()
            for hp in self.hyperparameters.space:
                chosen.merge([hp])
                if chosen.is_active(hp):
                    chosen.values[hp.name] = hp.default
            return {"status": "RUNNING", "values": chosen.values}

    DefaultsFirst.__name__ = f"DefaultsFirst{oracle_class.__name__}"
    return DefaultsFirst


def make_tuner(
    build,
    algorithm,
    objective,
    max_trials,
    max_epochs,
    directory,
    project,
    seed=0,
    defaults_trial=False,
):
    """KerasTuner's tuner of `algorithm`; with `defaults_trial` (random and
    bayesian only), its first trial is the hyperparameters' defaults."""
    import keras_tuner

    common = dict(directory=directory, project_name=project, overwrite=False)
    if isinstance(objective, tuple):  # (metric, "min" | "max"): one KerasTuner cannot infer
        objective = keras_tuner.Objective(*objective)
    searched = dict(objective=objective, seed=seed)
    if algorithm == "hyperband":
        if defaults_trial:
            raise ValueError("`defaults_trial` needs a random or bayesian search; got hyperband")
        return keras_tuner.Hyperband(
            build, max_epochs=max_epochs, factor=3, hyperband_iterations=1, **searched, **common
        )
    oracles = {
        "bayesian": keras_tuner.oracles.BayesianOptimizationOracle,
        "random": keras_tuner.oracles.RandomSearchOracle,
    }
    if algorithm not in oracles:
        raise ValueError(f"--algorithm must be one of {list(ALGORITHMS)}; received {algorithm!r}.")
    oracle_class = defaults_first(oracles[algorithm]) if defaults_trial else oracles[algorithm]
    # what keras_tuner.RandomSearch and BayesianOptimization make of their arguments
    oracle = oracle_class(max_trials=max_trials, **searched)
    return keras_tuner.Tuner(oracle=oracle, hypermodel=build, **common)


def run_search(
    build,
    train,
    validation,
    *,
    algorithm="hyperband",
    objective="val_loss",
    max_trials=10,
    max_epochs=4,
    output="runs",
    project="tuning",
    batch_size=64,
    seed=0,
    callbacks=(),
    record=None,
    defaults_trial=False,
    steps_per_epoch=None,
):
    """Search, print a summary table, write `best_hyperparameters.json` in
    `output` (the best trial's values, or what `record` makes of them);
    returns `(tuner, best_hyperparameters_dict)`. With `defaults_trial`,
    the first trial is the hyperparameters' defaults (`make_tuner`).
    `steps_per_epoch`: a dataset of several epochs' batches, one stream
    (`fit`'s argument). `objective`: a metric KerasTuner knows the
    direction of, or `(metric, "min" | "max")`."""
    try:
        tuner = make_tuner(
            build,
            algorithm,
            objective,
            max_trials,
            max_epochs,
            os.path.join(output, "tuning"),
            project,
            seed,
            defaults_trial,
        )
    except RuntimeError as error:  # KerasTuner's "Error reloading `Oracle`"
        if "reloading" not in str(error):
            raise
        raise ValueError(
            f"--output {output} holds a search that does not resume under these settings "
            f"(--algorithm {algorithm}: it was made with another algorithm, --epochs or search "
            "space): repeat its settings, pass --overwrite to delete it, or choose another --output"
        ) from None
    name = objective[0] if isinstance(objective, tuple) else objective
    report_trials(tuner, algorithm, max_trials, name)
    x, y = train
    dataset = y is None  # a dataset batches (and shuffles) itself: Keras warns otherwise
    # Ctrl-C between two steps, not in the middle of a trial's save; but the
    # chief oracle of a distributed search trains nothing (it serves the
    # workers until they finish): there Ctrl-C stops it at once.
    chief_oracle = "KERASTUNER_ORACLE_IP" in os.environ and "chief" in os.environ.get(
        "KERASTUNER_TUNER_ID", ""
    )
    if chief_oracle:
        end_chief_promptly()
    with contextlib.nullcontext() if chief_oracle else runs.ctrl_c_between_steps() as ctrl_c:
        tuner.search(
            x,
            y,
            validation_data=validation,
            epochs=max_epochs,
            batch_size=None if dataset else batch_size,
            shuffle=not dataset,
            steps_per_epoch=steps_per_epoch,
            callbacks=[*callbacks, *([ctrl_c] if ctrl_c else [])],
            verbose=0,
        )
    if os.environ.get("KERASTUNER_TUNER_ID", "chief") != "chief":
        return tuner, None  # a worker: the chief reports
    trials = tuner.oracle.get_best_trials(num_trials=len(tuner.oracle.trials))
    print(f"\n{'trial':<8s} {'score':>10s}  hyperparameters")
    for trial in trials:
        score = "-" if trial.score is None else f"{trial.score:10.4f}"
        print(f"{trial.trial_id:<8s} {score:>10s}  {trial.hyperparameters.values}")
    best = trials[0].hyperparameters.values if trials else {}
    if record is not None and trials:
        best = record(best)
    path = os.path.join(output, "best_hyperparameters.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(best, handle, indent=2, sort_keys=True)
    print(f"\nbest hyperparameters ({name} {trials[0].score if trials else '-'}): {path}")
    return tuner, best


def report_trials(tuner, algorithm, max_trials, objective):
    """A stderr line as each trial starts (`trial 3/10: {...}`, counting
    the trials of an earlier, resumed search) and ends (its objective): the
    search trains with `verbose=0` and is otherwise silent for minutes."""
    begin, end = tuner.on_trial_begin, tuner.on_trial_end
    total = "" if algorithm == "hyperband" else f"/{max_trials}"

    def say(line):
        print(line, file=sys.stderr, flush=True)

    def number(trial):  # 1, 2, ... in the order the oracle made them (a worker: its id)
        made = list(getattr(tuner.oracle, "trials", None) or {})
        return made.index(trial.trial_id) + 1 if trial.trial_id in made else trial.trial_id

    def on_trial_begin(trial):
        values = {
            k: v for k, v in trial.hyperparameters.values.items() if not k.startswith("tuner/")
        }
        epochs = trial.hyperparameters.values.get("tuner/epochs")
        say(
            f"tune: trial {number(trial)}{total} ({algorithm}"
            + (f", {epochs} epochs" if epochs else "")
            + f"): {values} ..."
        )
        begin(trial)

    def on_trial_end(trial):
        end(trial)
        score = tuner.oracle.get_trial(trial.trial_id).score
        score = "-" if score is None else f"{score:.4f}"
        say(f"tune: trial {number(trial)}{total} done: {objective} {score}")

    tuner.on_trial_begin, tuner.on_trial_end = on_trial_begin, on_trial_end


def load_hyperparameters(path):
    """The dict in a `best_hyperparameters.json` (`{}` for no path); raises
    `ValueError` with the path and the reason for a file that cannot be read."""
    if not path:
        return {}
    if os.path.isdir(path):
        raise ValueError(f"--hyperparameters {path} is a directory; expected a file")
    try:
        with open(path, encoding="utf-8-sig") as handle:  # a byte order mark is no part of it
            values = json.load(handle)
    except FileNotFoundError:
        raise ValueError(f"--hyperparameters {path}: no such file") from None
    except (OSError, ValueError) as error:
        raise ValueError(f"--hyperparameters {path}: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(
            f"--hyperparameters {path}: expected a JSON object of name: value, "
            f"got {type(values).__name__}"
        )
    return values
