"""Where the demo's training time goes on a CPU, and what takes it back:
the same training steps of the demo's model under each setting that a user
can change without changing the model, each in its own process.

Cells (rows of the table; `--cells` picks some):

- `tf` — TensorFlow as the recipe runs it (TensorFlow's default threads,
  and oneDNN as TensorFlow chooses: see `tf onednn on`): the baseline;
- `tf onednn off` — `TF_ENABLE_ONEDNN_OPTS=0` (Eigen kernels);
- `tf onednn on` — `TF_ENABLE_ONEDNN_OPTS=1`: TensorFlow turns oneDNN on
  by itself only on CPUs with AVX-512 VNNI or newer, so on an AVX2-only
  CPU `tf` is the Eigen kernels and this cell is oneDNN (the header says
  which is the default);
- `tf threads 1/1`, `tf threads 2/1`, `tf threads 2/2` — intra-/inter-op
  thread pools (`tf.config.threading`);
- `tf xla` — `compile(jit_compile=True)`;
- `tf bf16` — the `mixed_bfloat16` policy;
- `jax`, `torch` — the same model on Keras's JAX and PyTorch backends
  (the virtualenvs of `make test` and `make test-torch`; a backend whose
  virtualenv is missing is skipped, and said so);
- `tf 2 procs x 1 thread` — two processes at once, one thread each, on the
  same batches: the sum of their throughputs is what data parallelism over
  the two cores could reach at most (it leaves out the gradient exchange);
- `tf 2 workers x 1 thread` — real data parallelism over the two cores:
  two worker processes of one thread each in a `TF_CONFIG` cluster on
  localhost (`MultiWorkerMirroredStrategy`, the recipe's multi-worker
  path), each training on its own batch, the gradients summed over gRPC
  every step; its tokens/s count both workers' batches;
- `transformer` — the Transformer of the demo's width (`--family`'s other
  family), for ConvS2S against the Transformer per second;
- `tf gather loss` — `tf` with the earlier, gathered loss and perplexity
  (the target's log-probability gathered from `log_softmax`), against
  today's (the target logit selected, and `logsumexp`);
- `convs2s 2+2`, `convs2s 6+6` — the demo's ConvS2S with 2 or 6
  convolutions a side instead of 4 (`--num-layers 1` and `3`): what a
  step costs by depth.

Method. The parent (TensorFlow) draws `--steps` batches of the run's
bucketed training epoch at the demo's `--batch-tokens 1536` (the 3 most
frequent batch shapes, as `bench/training.py` does) and writes them to a
temporary `.npz`; each cell is a fresh process that builds the demo's
model (`recipes.translation.model.build_model`, the demo's settings),
warms up with `train_on_batch` on each shape twice, then times one
`train_on_batch` per batch. Tokens/s count real target tokens. Cells take
turns within each of `--repeats` rounds; the table holds medians of
same-round ratios to `tf` (and the range), and tokens per CPU-second.
`ONEDNN_MAX_CPU_ISA=AVX2` in the environment approximates an AVX2
machine on an AVX-512 one (oneDNN's kernels only; Eigen's and XLA's keep
the wider instructions).

    python bench/cpu_training.py --run runs/demo [--steps 16] [--repeats 3]
        [--cells tf jax ...] [--profile]

`--profile` instead traces 10 steps of `tf` with TensorFlow's profiler
and prints the op types that took the most time (the events of
TensorFlow's compute threads in the profile's `.xplane.pb`, summed by op
type).
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from keras_attention_recipes.translation.config import TranslationConfig, model_settings  # noqa: E402

VENVS = {"tf": ".venv", "jax": ".venv-jax", "torch": ".venv-torch"}
CELLS = {  # name -> (backend, environment, options of the child)
    "tf": ("tf", {}, {}),
    "tf onednn off": ("tf", {"TF_ENABLE_ONEDNN_OPTS": "0"}, {}),
    "tf onednn on": ("tf", {"TF_ENABLE_ONEDNN_OPTS": "1"}, {}),
    "tf threads 1/1": ("tf", {}, {"threads": [1, 1]}),
    "tf threads 2/1": ("tf", {}, {"threads": [2, 1]}),
    "tf threads 2/2": ("tf", {}, {"threads": [2, 2]}),
    "tf xla": ("tf", {}, {"jit": True}),
    "tf bf16": ("tf", {}, {"bf16": True}),
    "jax": ("jax", {"KERAS_BACKEND": "jax"}, {}),
    "torch": ("torch", {"KERAS_BACKEND": "torch"}, {}),
    "tf 2 procs x 1 thread": ("tf", {}, {"threads": [1, 1], "processes": 2}),
    "tf 2 workers x 1 thread": ("tf", {}, {"threads": [1, 1], "processes": 2, "workers": True}),
    "transformer": ("tf", {}, {"family": "transformer"}),
    "tf gather loss": ("tf", {}, {"gather_loss": True}),
    # the demo's ConvS2S with 2+2 and 6+6 convolutions instead of 4+4 (--num-layers 1, 3)
    "convs2s 2+2": ("tf", {}, {"num_layers": 1}),
    "convs2s 6+6": ("tf", {}, {"num_layers": 3}),
}
BASELINE = "tf"


def demo_settings(**changes):
    """The demo's model settings (`COMMAND_DEFAULTS["demo"]`, its family's
    defaults filled in: `model_settings`) with `changes` to its flags."""
    return model_settings(TranslationConfig.for_command("demo", **changes))


def draw_batches(run, steps, path, seed=0):
    """`steps` batches of the run's bucketed epoch (`--batch-tokens 1536`),
    the 3 most frequent shapes, into `path`; returns the vocabulary sizes."""
    import numpy as np

    sys.path.insert(0, HERE)
    from keras_attention_recipes.translation.data import load_tokenizers
    from keras_attention_recipes.translation.pipeline import make_dataset
    from training import bucketed_sample  # bench/training.py

    source_tokenizer, target_tokenizer = load_tokenizers(run)
    data, _, _ = make_dataset(
        os.path.join(run, "data", "train.tsv"),
        source_tokenizer,
        target_tokenizer,
        demo_settings()["max_length"],
        64,
        shuffle=True,
        seed=seed,
        batch_tokens=1536,
    )
    epoch = [((s, t), o) for (s, t), o in data.as_numpy_iterator()]
    batches, _, _ = bucketed_sample(epoch, steps, 3, seed)
    arrays = {}
    for i, ((source, target_in), target_out) in enumerate(batches):
        arrays[f"source_{i}"], arrays[f"target_in_{i}"] = source, target_in
        arrays[f"target_out_{i}"] = target_out
    np.savez(path, **arrays)
    return source_tokenizer.vocab_size, target_tokenizer.vocab_size


def child(args):
    """One cell's measurement, printed as a JSON line."""
    import numpy as np

    options = json.loads(args.options)
    if "threads" in options:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(options["threads"][0])
        tf.config.threading.set_inter_op_parallelism_threads(options["threads"][1])
    strategy = None
    if options.get("workers"):  # TF_CONFIG from `launch`: collectives before any other op
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras
    from keras_attention_recipes.translation.model import build_model

    stored = np.load(args.batches)
    count = len([k for k in stored.files if k.startswith("source_")])
    batches = [
        ((stored[f"source_{i}"], stored[f"target_in_{i}"]), stored[f"target_out_{i}"])
        for i in range(count)
    ]
    if options.get("bf16"):
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    config = demo_settings(
        **{key: options[key] for key in ("family", "num_layers") if key in options}
    )
    config["jit"] = options.get("jit", False)
    if strategy is not None:
        from keras_attention.training.distribute import adapt_for_distribution

        with strategy.scope():
            model = adapt_for_distribution(
                build_model(config, args.source_vocab, args.target_vocab)
            )
    else:
        model = build_model(config, args.source_vocab, args.target_vocab)
    if options.get("gather_loss"):
        recompile_with_gather_loss(model)
    shapes = {}
    for batch in batches:
        shapes.setdefault((batch[0][0].shape, batch[0][1].shape), batch)
    for _ in range(2):
        for (source, target_in), target_out in shapes.values():
            model.train_on_batch((source, target_in), target_out)
    tokens = sum(int(np.count_nonzero(target_out)) for _, target_out in batches)
    wall, cpu = time.perf_counter(), time.process_time()
    for (source, target_in), target_out in batches:
        model.train_on_batch((source, target_in), target_out)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"tokens": tokens, "wall": wall, "cpu": cpu}))


def recompile_with_gather_loss(model):
    """The earlier, gathered loss and perplexity: the target's
    log-probability gathered from `log_softmax` (whose gradient is a
    segment sum over every (B, T, V) entry), for the before/after cell."""
    import keras
    from keras import ops

    from keras_attention.seq2seq import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity

    def picked(y_true, logits):
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        gathered = ops.take_along_axis(log_probs, ops.cast(y_true, "int32")[..., None], axis=-1)
        return gathered[..., 0], log_probs

    class GatherCrossEntropy(MaskedCrossEntropy):
        def call(self, y_true, y_pred):
            target, log_probs = picked(y_true, y_pred)
            token_loss = -(1 - self.label_smoothing) * target - self.label_smoothing * ops.mean(
                log_probs, axis=-1
            )
            mask = ops.cast(ops.not_equal(ops.cast(y_true, "int32"), self.padding_id), "float32")
            return ops.sum(token_loss * mask) / ops.maximum(ops.sum(mask), 1.0)

    class GatherPerplexity(MaskedPerplexity):
        def token_values(self, y_true, logits):
            return -picked(y_true, logits)[0]

    model.compile(
        keras.optimizers.Adam(model.optimizer._learning_rate, global_clipnorm=1.0),  # the schedule
        GatherCrossEntropy(label_smoothing=0.1),
        metrics=[MaskedAccuracy(), GatherPerplexity()],
    )


def free_ports(count):
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for handle in sockets:
        handle.bind(("localhost", 0))
    ports = [handle.getsockname()[1] for handle in sockets]
    for handle in sockets:
        handle.close()
    return ports


def launch(cell, args, vocab, batches, tf_config=None):
    backend, env, options = CELLS[cell]
    python = os.path.join(ROOT, VENVS[backend], "bin", "python")
    command = [python, os.path.abspath(__file__), "--child", "--batches", batches]
    command += ["--options", json.dumps(options)]
    command += ["--source-vocab", str(vocab[0]), "--target-vocab", str(vocab[1])]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    environment["PYTHONPATH"] = ROOT
    if tf_config is not None:
        environment["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def measure(cell, args, vocab, batches):
    """Tokens/s and tokens per CPU-second of one run of `cell` (the sum over
    its processes)."""
    count = CELLS[cell][2].get("processes", 1)
    configs = [None] * count
    if CELLS[cell][2].get("workers"):  # one cluster of `count` workers
        workers = [f"localhost:{port}" for port in free_ports(count)]
        configs = [
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            for index in range(count)
        ]
    processes = [launch(cell, args, vocab, batches, config) for config in configs]
    results, failures = [], []
    for process in processes:
        out, err = process.communicate()
        if process.returncode:
            failures.append(
                next((line for line in err.splitlines() if "what()" in line), err[-300:])
            )
        else:
            results.append(json.loads(out.strip().splitlines()[-1]))
    if failures:  # e.g. bfloat16 where oneDNN has no kernel for this ISA
        print(f"cell {cell!r} failed: {failures[0].strip()}", flush=True)
        return None
    return (
        sum(r["tokens"] / r["wall"] for r in results),
        sum(r["tokens"] for r in results) / sum(r["cpu"] for r in results),
    )


def profile(args, vocab, batches):
    """Op types by total time over 10 traced steps of the `tf` cell."""
    import numpy as np
    import tensorflow as tf
    from keras_attention_recipes.translation.model import build_model

    stored = np.load(batches)
    batch = ((stored["source_0"], stored["target_in_0"]), stored["target_out_0"])
    model = build_model({**demo_settings(family=args.family), "jit": False}, *vocab)
    for _ in range(3):
        model.train_on_batch(*batch)
    folder = tempfile.mkdtemp(prefix="cpu-profile-")
    tf.profiler.experimental.start(folder)
    for _ in range(10):
        model.train_on_batch(*batch)
    tf.profiler.experimental.stop()
    totals = op_type_seconds(glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True))
    everything = sum(totals.values())
    print(
        f"{args.family}, one batch of shape {batch[0][1].shape}, 10 steps: op time by type "
        f"(summed over TensorFlow's compute threads: {everything * 100:.0f} ms a step in all)"
    )
    for kind, seconds in sorted(totals.items(), key=lambda item: -item[1])[:15]:
        print(f"  {kind:32s} {seconds * 100:8.1f} ms/step  {100 * seconds / everything:5.1f}%")


WRAPPERS = ("Process", "ParallelFor", "StartRegion", "StopRegion", "Record")


def op_type_seconds(paths):
    """Seconds by op type in TensorFlow profiles (`.xplane.pb`): the events
    of the host's `tf_Compute` threads, named `scope/name:Type`, without the
    executor's own wrapping regions."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals = {}
    for path in paths:
        space = xplane_pb2.XSpace()
        with open(path, "rb") as handle:
            space.ParseFromString(handle.read())
        for plane in space.planes:
            for line in plane.lines:
                if not line.name.startswith("tf_Compute"):
                    continue
                for event in line.events:
                    kind = plane.event_metadata[event.metadata_id].name.split(":")[-1]
                    if kind not in WRAPPERS:
                        totals[kind] = totals.get(kind, 0.0) + event.duration_ps * 1e-12
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/demo", help="a run's folder (data and vocabularies)")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cells", nargs="+", choices=list(CELLS), default=list(CELLS))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--family", default="convs2s", help="--profile's model")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--source-vocab", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--target-vocab", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    from keras_attention_recipes.runs import import_tensorflow_quietly

    import_tensorflow_quietly()
    folder = tempfile.mkdtemp(prefix="cpu-training-")
    batches = os.path.join(folder, "batches.npz")
    vocab = draw_batches(args.run, args.steps, batches)
    if args.profile:
        return profile(args, vocab, batches)
    cells = [c for c in args.cells if os.path.exists(os.path.join(ROOT, VENVS[CELLS[c][0]]))]
    for cell in sorted(set(args.cells) - set(cells)):
        print(f"skipped {cell!r}: no {VENVS[CELLS[cell][0]]} (make test / make test-torch)")
    if BASELINE not in cells:
        cells.insert(0, BASELINE)
    sys.path.insert(0, HERE)
    from machine import cpu  # bench/machine.py

    isa = cpu()["isa"]
    from tensorflow.python.util import _pywrap_util_port

    print(
        f"CPU flags: {isa}; ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}; "
        f"oneDNN in `tf`: {'on' if _pywrap_util_port.IsMklEnabled() else 'off'}; "
        f"{os.cpu_count()} cores; {args.steps} steps x {args.repeats} rounds",
        flush=True,
    )
    rounds = []
    for index in range(args.repeats):
        results = {}
        # Each round starts at the next cell: with `tf` always first, it ran
        # 7-15% behind `tf onednn off`, the same settings on an AVX2 CPU.
        for cell in cells[index % len(cells) :] + cells[: index % len(cells)]:
            if all(cell in r for r in rounds):  # not failed before
                measured = measure(cell, args, vocab, batches)
                if measured is not None:
                    results[cell] = measured
        rounds.append(results)
        print(
            f"round {index + 1}: "
            + ", ".join(f"{cell} {wall:.0f}" for cell, (wall, _) in results.items()),
            flush=True,
        )
    print("\n| cell | tokens/s | x tf (range) | tokens/CPU-s | x tf, CPU |")
    print("|---|---|---|---|---|")
    for cell in cells:
        if not all(cell in r for r in rounds):
            print(f"| {cell} | failed | | | |")
            continue
        walls = [r[cell][0] for r in rounds]
        ratios = [r[cell][0] / r[BASELINE][0] for r in rounds]
        cpus = [r[cell][1] / r[BASELINE][1] for r in rounds]
        print(
            f"| {cell} | {statistics.median(walls):.0f} | {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"{statistics.median([r[cell][1] for r in rounds]):.0f} | "
            f"{statistics.median(cpus):.2f} |"
        )


if __name__ == "__main__":
    main()
