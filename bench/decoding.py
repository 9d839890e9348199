"""Generation speed on CPU against what a user would pick instead: target
tokens per second and per-request latency of greedy and beam search (K=4),
with every system generating the same number of tokens.

Models (`--model`), random weights, the same random source batch (length
20), exactly `--length` target tokens per row (greedy: per row; beam: per
hypothesis returned):

- `bench` (default): a Transformer of 3 encoder and 3 decoder layers, width
  256, 4 heads, feed-forward 1024, vocabulary 8000 (each settable:
  `--layers`, `--width`, `--heads`, `--ffn`, `--vocab`);
- `demo-transformer`: the demo's Transformer (2+2 layers, width 128, 4
  heads, feed-forward 256, 4,000 pieces a side);
- `base`: Transformer-base (6+6 layers, width 512, 8 heads, feed-forward
  2048, 32,000 pieces a side);
- `demo-convs2s`: the demo's ConvS2S (`recipes.translation.model.build_model`
  of the demo's settings, 4,000 pieces a side): no peer has its
  architecture, so ours only.

Systems (`--ours` picks ours; the peers need `--peers-python`):

- `tf`: `greedy_search` / `beam_search` (the best of K) as a `tf.function`
  in process; `xla`: the same with `jit_compile=True`;
- `sm`: the same two searches as token-ids -> token-ids endpoints of a
  `keras.export.ExportArchive`, written by
  `keras_attention.serving.versions.export_archive` and called after
  `tf.saved_model.load` (the translator archive's text signatures need
  tokenizers, which would add tokenisation to the timing); `xla-sm`: the
  same endpoints, each calling its search as an XLA-compiled function
  (`jit_compile=True`, marked must-compile in the SavedModel), as an XLA
  export does;
- each of those again (`int8` in the label) on a copy of the model (same
  weights) after `model.quantize("int8")`: weight-only int8 with
  per-output-channel scales (`serving.records.quantized_copy`),
  dequantized once per call before the search's loop, which multiplies in
  float32 (`quantization.dequantized`);
- Hugging Face `transformers` `MarianMTModel.generate` (PyTorch, CPU), built
  from a `MarianConfig` with the same dimensions;
- CTranslate2 converted from that Hugging Face model, fp32 and int8.

Forcing equal lengths: our searches (`bench/decoding_searches.py`) run a
thin wrapper model whose `decode_step` adds -1e9 to the `<eos>` and `<pad>`
logits (what Hugging Face's `min_new_tokens` does to `<eos>`), so every row
runs all `--length` steps; Hugging Face runs `min_new_tokens = max_new_tokens`,
CTranslate2 `min_decoding_length = max_decoding_length`. The first call of
each system and cell asserts that every row has exactly `--length` tokens
and no `<eos>`.

The peers run in a worker process of the virtualenv `--peers-python`
(`bench/decoding_peers.py`, one JSON request per line) and are skipped when
it is missing. Within each cell (`--cells`, search:batch), the systems are
timed in turn, ours and the peers alternating, `--repeats` rounds, each
round at least `--min-seconds` of calls of one request (the batch);
tokens/s and ratios are medians of the rounds, the latency percentiles are
over every timed request of the cell. `--profile` adds where one step's
time goes, and the number of ops (graph nodes) in the while-loop body of
the exported beam search (`loop_body_ops`), the per-step op overhead, and
the kernels of one step as XLA compiles each search (`compiled_loop_kernels`).
`--smoke` (the tests) runs a tiny model, ours only (the int8 rows
included), one repeat.

    python bench/decoding.py [--model base] [--cells greedy:1,beam4:1,beam4:32]
        [--ours sm,xla-sm] [--repeats 5] [--profile] [--smoke]
"""

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention.seq2seq import TransformerSeq2Seq  # noqa: E402
from keras_attention.serving.records import quantized_copy  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from decoding_searches import (  # noqa: E402
    ForcedLength,
    check_lengths,
    compiled_loop_kernels,
    export_searches,
    loop_body_ops,
    searches,
)
from timing import PeerWorker, median_ratio  # noqa: E402

PEERS = ("hf", "ct2-fp32", "ct2-int8")
OURS = ("tf", "xla", "sm", "xla-sm")
SYSTEM_LABELS = {  # --ours name -> the label of ours (an int8 copy adds "int8")
    "tf": "tf.function",
    "xla": "XLA",
    "sm": "SavedModel",
    "xla-sm": "XLA SavedModel",
}
MODELS = {  # --model -> (family, vocabulary, width, layers, heads, feed-forward)
    "demo-transformer": ("transformer", 4000, 128, 2, 4, 256),
    "base": ("transformer", 32000, 512, 6, 8, 2048),
    "demo-convs2s": ("convs2s", 4000, 128, 2, None, None),
}
LABELS = {"hf": "HF generate", "ct2-fp32": "CT2 fp32", "ct2-int8": "CT2 int8"}


class Peers(PeerWorker):
    """The worker of `bench/decoding_peers.py` in the peers' virtualenv."""

    def __init__(self, python, source, args, workdir, systems):
        path = os.path.join(workdir, "source.npy")
        np.save(path, source)
        command = [python, os.path.join(HERE, "decoding_peers.py"), "--source", path]
        command += ["--workdir", workdir, "--systems", ",".join(systems)]
        for flag in (
            "length",
            "source_length",
            "vocab",
            "width",
            "layers",
            "heads",
            "ffn",
            "threads",
        ):
            command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        env = dict(
            os.environ,
            TRANSFORMERS_VERBOSITY="error",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_HUB_OFFLINE="1",
        )
        # OpenMP's wait policy (PyTorch's and CTranslate2's threads): its
        # default spins a while before sleeping. PASSIVE (sleep at once) made
        # Hugging Face's greedy batch 1 7x faster with 2 threads on a 2-core
        # machine, and CTranslate2's 12x slower (100 ms against 8 ms), so it
        # is a flag, not a fixed choice.
        if args.omp_wait_policy != "default":
            env["OMP_WAIT_POLICY"] = args.omp_wait_policy
        super().__init__(command, os.path.join(workdir, "peers.log"), "the peers' worker", env)
        self.versions = self.ready.get("ready")

    def time(self, system, search, batch, iters):
        """Seconds of each of `iters` calls."""
        request = {"op": "time", "system": system, "search": search, "batch": batch}
        return self.request(**request, iters=iters)["calls"]


def run(fn, x):
    return fn(x).numpy()


def timed(fn, iters):
    """Seconds of each of `iters` calls of `fn`."""
    calls = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        calls.append(time.perf_counter() - start)
    return calls


def profile_parts(model, source, length, K):
    """The functions `profile` times, by name: the whole beam search, and
    each part of one step alone in a `while_loop` of `length` steps."""
    batch = source.shape[0]
    rows = batch * K
    state = model.encode(tf.repeat(source, K, axis=0), max_length=length)
    tokens = tf.fill((rows,), model.sos_id)
    # A reorder among each source's beams (beam search's): the beams reversed.
    order = tf.reshape(tf.reverse(tf.reshape(tf.range(rows), (batch, K)), [1]), (-1,))

    def loop(step):
        def run(state):
            t, tokens_out, state = tf.while_loop(lambda t, *_: t < length, step, (0, tokens, state))
            # Read one element of every output, or Grappler prunes loop
            # variables nothing reads (a reorder alone would vanish).
            firsts = [tf.cast(tf.reshape(x, [-1])[0], tf.int32) for x in tf.nest.flatten(state)]
            return t + tokens_out[0] + tf.add_n(firsts)

        return tf.function(run, autograph=False)

    def full_step(t, tokens, state):
        logits, state, _ = model.decode_step(tokens, state)
        return t + 1, tokens + tf.cast(logits[0, 0] > 1e30, tf.int32), state  # keeps logits

    def layers_only(t, tokens, state):
        index = state["step"][0]
        x = model.target_embedding(tokens[:, None], start_index=index)
        new = dict(state)
        for i, layer in enumerate(model.decoder_layers):
            x, _, new[f"layer_{i}"] = layer.step(
                x, state[f"layer_{i}"], index, encoder_padding_mask=state["source_mask"]
            )
        new["step"] = state["step"] + 1
        return t + 1, tokens + tf.cast(x[0, 0, 0] > 1e30, tf.int32), new

    def reorder(t, tokens, state):
        return t + 1, tokens, model.reorder_beams(state, order)

    logits = tf.random.normal((rows, model.target_vocab_size))
    bias = ForcedLength(model).bias

    def choose(t, tokens, state):
        # What beam_search does with the logits before it gathers: the
        # length-forcing bias, log_softmax, and the top 2K of K x V.
        log_probs = tf.nn.log_softmax(logits + bias + tf.cast(tokens[0], tf.float32))
        top, _ = tf.math.top_k(tf.reshape(log_probs, (batch, K * model.target_vocab_size)), 2 * K)
        return t + 1, tokens + tf.cast(top[0, 0] > 1e30, tf.int32), state

    search = tf.function(searches(model, length)["beam4"], autograph=False)
    parts = {
        "beam search (whole)": functools.partial(run, search, source),
        "decode_step x L": functools.partial(run, loop(full_step), state),
        "decoder layers x L": functools.partial(run, loop(layers_only), state),
        "reorder_beams x L": functools.partial(run, loop(reorder), state),
        "log_softmax + top_k x L": functools.partial(run, loop(choose), state),
    }
    return search, parts


def profile(model, source, length, repeats):
    """Where one step of beam search (K=4, batch 32) goes: the whole search
    per step, against each part run alone in a `while_loop` of L steps: the
    model's decode_step (with and without the output projection), the
    reorder of its caches, and the log_softmax and top_k of the search."""
    batch, K = source.shape[0], 4
    search, parts = profile_parts(model, source, length, K)
    times = {name: [] for name in parts}
    for fn in parts.values():
        fn()
    for _ in range(repeats):
        for name, fn in parts.items():
            times[name].append(timed(fn, 1)[0])
    ms = {name: 1e3 * statistics.median(t) / length for name, t in times.items()}
    encode = tf.function(lambda s: model.encode(s, max_length=length)["step"], autograph=False)
    encode(tf.repeat(source, K, axis=0))
    encode_ms = 1e3 * statistics.median(
        timed(lambda: encode(tf.repeat(source, K, axis=0)).numpy(), 1)[0] for _ in range(repeats)
    )
    whole, step, layers, gather, choice = (ms[name] for name in parts)
    vocab = model.target_vocab_size
    print(f"\none step of beam search, K={K}, batch {batch} ({batch * K} rows), ms per step:")
    print(f"  whole search (encode included)  {whole:7.2f}")
    print(f"  encode (once, per step)         {encode_ms / length:7.2f}")
    print(f"  decode_step                     {step:7.2f}")
    print(f"    decoder layers + embedding    {layers:7.2f}")
    print(f"    output projection (to {vocab})  {step - layers:7.2f}  (by difference)")
    print(f"  reorder_beams (cache gather)    {gather:7.2f}")
    print(f"  log_softmax + top_k(2K of K.V)  {choice:7.2f}")
    rest = whole - encode_ms / length - step - gather - choice
    # Parts overlap in the whole search (two threads), so this can be < 0.
    print(f"  other search bookkeeping        {rest:7.2f}  (by difference)")
    nodes, ops = loop_body_ops(search, tf.TensorSpec((None, None), tf.int32))
    print(
        f"ops in the while-loop body of the beam search graph (one step, before Grappler): "
        f"{nodes}, {nodes - ops['Const']} besides constants; most: "
        + ", ".join(f"{op} {count}" for op, count in ops.most_common(6))
    )


def compiled_profile(model, source, length):
    """The kernels of one step of each search as XLA compiles it (greedy at
    batch 1, beam 4 at batch 32): the count, the most frequent opcodes, and
    the sines and cosines in the whole program."""
    print("\nkernels of one compiled step (XLA's optimized HLO, while-loop body):")
    for name, rows in (("greedy", 1), ("beam4", 32)):
        search = tf.function(searches(model, length)[name], jit_compile=True, autograph=False)
        kernels, ops = compiled_loop_kernels(search, source[:rows])
        trig = ops.pop("sine/cosine")
        common = ", ".join(f"{op} {count}" for op, count in ops.most_common(5))
        print(f"  {name}, batch {rows}: {kernels} kernels ({common}); sine/cosine: {trig}")


def use_threads(threads):
    """TensorFlow's intra-op threads, unless TensorFlow already ran
    something in this process (a test's smoke run after another's)."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:
        pass


def main(argv=None):
    args = parse(argv)
    use_threads(args.threads)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    rows = max([batch for _, batch in args.cells] + [32])  # the profile runs batch 32
    source = rng.integers(4, args.vocab, (rows, args.source_length)).astype("int32")
    model = build_model(args)
    int8 = quantized_copy(model, "int8")  # the same weights, quantized
    workdir = tempfile.mkdtemp(prefix="bench-decoding-")
    try:
        measure(args, model, int8, source, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def parse(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=["bench", *MODELS], default="bench")
    parser.add_argument(
        "--cells",
        default="greedy:1,greedy:32,beam4:1,beam4:32",
        help="search:batch pairs, comma-separated (searches: greedy, beam4)",
    )
    parser.add_argument("--length", type=int, default=32, help="target tokens per row")
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--min-seconds", type=float, default=0.3, help="repeat short calls up to this long"
    )
    parser.add_argument(
        "--peers-python",
        default=os.path.join(os.path.dirname(HERE), ".venv-bench-peers", "bin", "python"),
        help="the python of the peers' virtualenv (make bench-decoding creates it)",
    )
    parser.add_argument("--peers", default=",".join(PEERS), help="peers to run ('' for none)")
    parser.add_argument(
        "--ours", default=",".join(OURS), help=f"our systems, some of {','.join(OURS)}"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count(),
        help="intra-op threads of every system (TensorFlow, PyTorch, CTranslate2)",
    )
    parser.add_argument(
        "--omp-wait-policy",
        choices=["default", "PASSIVE", "ACTIVE"],
        default="default",
        help="OMP_WAIT_POLICY of the peers' worker (default: OpenMP's own)",
    )
    parser.add_argument("--no-xla", action="store_true", help="skip ours with jit_compile")
    parser.add_argument("--profile", action="store_true", help="where one beam step goes")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few seconds: a tiny model, ours only, one repeat (for the tests)",
    )
    args = parser.parse_args(argv)
    args.family = "transformer"
    if args.model in MODELS:
        args.family, args.vocab, args.width, args.layers, args.heads, args.ffn = MODELS[args.model]
    if args.smoke:
        args.vocab, args.width, args.layers, args.heads, args.ffn = 50, 16, 1, 2, 32
        args.length, args.source_length, args.repeats, args.min_seconds = 4, 5, 1, 0.0
        args.cells, args.peers, args.no_xla = "greedy:2,beam4:2", "", True
    if args.family != "transformer":
        args.peers = ""  # no peer has the architecture
    args.ours = [name for name in args.ours.split(",") if name]
    if args.no_xla:
        args.ours = [name for name in args.ours if not name.startswith("xla")]
    unknown = sorted(set(args.ours) - set(OURS))
    if unknown:
        parser.error(f"--ours: unknown systems {unknown}; expected some of {list(OURS)}")
    args.cells = parse_cells(parser, args.cells)
    return args


def parse_cells(parser, text):
    """`[(search, batch)]` of `--cells` ("greedy:1,beam4:32")."""
    cells = []
    for cell in text.split(","):
        search, _, batch = cell.partition(":")
        if search not in ("greedy", "beam4") or not batch.isdigit() or int(batch) < 1:
            parser.error(
                f"--cells: each cell is search:batch with search greedy or beam4 and a "
                f"positive batch; got {cell!r}"
            )
        cells.append((search, int(batch)))
    return cells


def build_model(args):
    """The model of `args` (`--model` and its dimensions), built."""
    if args.family == "convs2s":
        from cpu_training import demo_settings  # bench/cpu_training.py
        from keras_attention_recipes.translation.model import build_model as recipe_model

        return recipe_model(dict(demo_settings(), max_length=args.length), args.vocab, args.vocab)
    model = TransformerSeq2Seq(
        args.vocab,
        args.vocab,
        hidden_dim=args.width,
        num_heads=args.heads,
        intermediate_dim=args.ffn,
        num_layers=args.layers,
        max_length=args.length,
    )
    model.build()
    return model


def compile_ours(args, model, int8, search_names, workdir):
    """Our systems, `{label: {search: callable}}` (those of `--ours`: the
    `tf.function`, XLA, the exported SavedModel and the XLA SavedModel, for
    the float32 model and its int8 copy), and the SavedModels' variable
    sizes (float32, int8)."""
    ours, loaded, sizes = {}, [], []
    for label, ours_model in (("ours", model), ("ours int8", int8)):
        for name in args.ours:
            system = f"{label} {SYSTEM_LABELS[name]}"
            if name in ("tf", "xla"):
                jit = name == "xla"
                ours[system] = {
                    search_name: tf.function(search, autograph=False, jit_compile=jit)
                    for search_name, search in searches(ours_model, args.length).items()
                }
                continue
            # The loaded SavedModels stay referenced: their functions hold their
            # variables only weakly.
            folder = os.path.join(workdir, f"{name}-{'int8' if ours_model is int8 else 'f32'}")
            loaded.append(export_searches(ours_model, args.length, folder, xla=name == "xla-sm"))
            ours[system] = {search: getattr(loaded[-1], search) for search in search_names}
            if name == "sm":
                sizes.append(loaded[-1].variables_bytes)
    return ours, loaded, sizes


def print_setup(args, peers, sizes):
    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, {cpu_line()}, "
        f"GPU: {bool(tf.config.list_physical_devices('GPU'))}, {args.threads} threads each"
        + (f"; peers: {peers.versions}" if peers else "")
    )
    if args.family == "convs2s":
        shape = f"the demo's ConvS2S, vocabulary {args.vocab}"
    else:
        shape = (
            f"Transformer {args.layers}+{args.layers} layers, width {args.width}, "
            f"{args.heads} heads, feed-forward {args.ffn}, vocabulary {args.vocab}"
        )
    print(
        f"{args.model}: {shape}; source length {args.source_length}, {args.length} tokens "
        f"generated per row; {args.repeats} repeats, medians; tok/s = batch x length / time"
    )
    if len(sizes) == 2:
        print(
            f"SavedModel variables: float32 {sizes[0] / 2**20:.2f} MiB, int8 "
            f"{sizes[1] / 2**20:.2f} MiB ({sizes[0] / sizes[1]:.2f}x smaller)"
        )
    print()


def cpu_line():
    """This machine's CPU as every benchmark names it (bench/machine.py)."""
    from machine import cpu

    machine = cpu()
    return f"CPU {machine['model']}, {machine['cores']} cores, {machine['isa']}"


def time_cell(args, model, ours, peers, peer_names, source, search, batch):
    """`{system: [seconds of each call, one list per repeat]}` for one
    search and batch size, the systems timed in turn."""
    x = tf.constant(source[:batch])
    calls = {}
    for name in ours:
        fn = ours[name][search]
        check_lengths(name, fn(x), batch, args.length, model)  # trace, warm up, check
        start = time.perf_counter()
        fn(x).numpy()
        iters = max(1, round(args.min_seconds / (time.perf_counter() - start)))
        calls[name] = functools.partial(timed, functools.partial(run, fn, x), iters)
    for name in peer_names:
        iters = max(1, round(args.min_seconds / peers.time(name, search, batch, 1)[0]))
        calls[name] = functools.partial(peers.time, name, search, batch, iters)
    times = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():  # ours and the peers in turn
            times[name].append(call())
    return times


def mean_per_round(times):
    """Mean seconds per call of each round."""
    return [statistics.fmean(calls) for calls in times]


def print_ratios(ours, peer_names, rows):
    print(
        "\nspeed ratios ours/peer (> 1: ours faster), medians of same-round ratios; "
        "tf = tf.function, SM = SavedModel, XSM = XLA SavedModel, tf8 / XLA8 / SM8 / XSM8 = "
        "the same int8, HF = Hugging Face, CT2 = CTranslate2 fp32, i8 = CTranslate2 int8:"
    )
    short = {"tf.function": "tf", "XLA": "XLA", "SavedModel": "SM", "XLA SavedModel": "XSM"}
    short = {
        **{f"ours {label}": code for label, code in short.items()},
        **{f"ours int8 {label}": code + "8" for label, code in short.items()},
        "hf": "HF",
        "ct2-fp32": "CT2",
        "ct2-int8": "i8",
    }
    pairs = [(o, p) for o in ours for p in peer_names]
    print(
        f"{'search':<7s} {'batch':>5s} "
        + "".join(f"{short[o] + '/' + short[p]:>9s}" for o, p in pairs)
    )
    for search, batch, times in rows:
        line = f"{search:<7s} {batch:5d} "
        for o, p in pairs:
            line += f"{median_ratio(mean_per_round(times[p]), mean_per_round(times[o])):9.2f}"
        print(line)


def print_latencies(systems, rows):
    """p50 and p99 milliseconds per request (one call of a batch) of every
    system and cell, over every timed request."""
    print("\nlatency per request, ms: p50 / p99 (requests timed)")
    for search, batch, times in rows:
        print(f"- {search}, batch {batch}:")
        for name in systems:
            calls = np.concatenate(times[name]) * 1e3
            p50, p99 = np.percentile(calls, [50, 99])
            print(f"  {LABELS.get(name, name):<24s} {p50:9.2f} / {p99:9.2f}  ({len(calls)})")


def measure(args, model, int8, source, workdir):
    search_names = sorted({search for search, _ in args.cells})
    ours, loaded, sizes = compile_ours(args, model, int8, search_names, workdir)

    peer_names = [p for p in args.peers.split(",") if p]
    peers = None
    if peer_names and os.path.exists(args.peers_python):
        peers = Peers(args.peers_python, source, args, workdir, peer_names)
    elif peer_names:
        print(f"no peers' virtualenv at {args.peers_python} (make bench-decoding): ours only\n")
        peer_names = []

    print_setup(args, peers, sizes)
    systems = list(ours) + peer_names
    header = f"{'search':<7s} {'batch':>5s} " + "".join(f"{LABELS.get(s, s):>26s}" for s in systems)
    rows = []
    for search, batch in args.cells:
        times = time_cell(args, model, ours, peers, peer_names, source, search, batch)
        rows.append((search, batch, times))
    if peers:
        peers.close()

    print(header)
    for search, batch, times in rows:
        line = f"{search:<7s} {batch:5d} "
        for name in systems:
            seconds = statistics.median(mean_per_round(times[name]))
            line += f"{batch * args.length / seconds:26.0f}"
        print(line)
    if peer_names:
        print_ratios(ours, peer_names, rows)
    print_latencies(systems, rows)
    if args.profile and args.family == "transformer":
        profile(model, tf.constant(source[:32]), args.length, args.repeats)
        compiled_profile(model, tf.constant(source[:32]), args.length)


if __name__ == "__main__":
    main()
