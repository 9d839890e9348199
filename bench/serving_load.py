"""The exported translator under load: many requests of mixed sizes from
several threads, in one process, then the same through TF Serving's REST
API with the project's client.

    python bench/serving_load.py [--export saved_models/translator/N] \\
        [--requests 10000] [--threads 8] [--max-batch 64] [--max-words 60] \\
        [--words runs/demo/data/test.tsv] [--seed 0] [--json load.json]

1. `signature`: the SavedModel loaded with `tf.saved_model.load`, its
   `serving_default` called from `--threads` threads.
2. `rest`: `recipes/serving_client.py`'s `predict_rest` (what
   `keras-attention-serving-client` sends) from `--threads` threads against
   `tests/serving_stub.py`, a stand-in for TF Serving's REST API that calls
   the same SavedModel in this process (TF Serving is not installable
   here). Every `--bad-every`-th REST request is a bad one (an unknown
   signature, an unknown model version, a text matrix) that the client
   must turn into an error naming the server's answer.

Each request holds 1 to `--max-batch` sentences of 0 to `--max-words`
words drawn from `--words` (a TSV's first column or a text file; default
the demo run's test split, else the export's warm-up requests): about 5%
empty strings and 5% of `--max-words` words (longer than the model's
`max_length`: the export cuts them and says `truncated`), the rest uniform;
the first request of each run is the largest, `--max-batch` sentences of
`--max-words` words. Warm-up requests (not counted) run first, the largest
ones included, then resident memory (VmRSS, `/proc/self/status`) is read;
it is read again at the end.

Reported per run: p50/p95/p99 latency, sentences per second, RSS after
warm-up and at the end, the load time and the time the export's own
warm-up file took (replayed once after loading, as TF Serving does; an XLA
export compiles its programs there), and the checks: no error, every response's
`translation` (and every other output) has its request's row count, empty
strings translate to "". Goal: those checks hold and RSS grows < 5% after
warm-up. Exits with status 1 when a goal is missed.
"""

import argparse
import itertools
import json
import os
import platform
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from machine import cpu  # noqa: E402 (bench/machine.py)

GROWTH_GOAL = 5.0  # percent of the RSS after warm-up
DEFAULT_WORDS = os.path.join("runs", "demo", "data", "test.tsv")


def default_export(root=ROOT):
    """The newest version under `saved_models/translator/` (or None)."""
    base = os.path.join(root, "saved_models", "translator")
    versions = [v for v in os.listdir(base) if v.isdigit()] if os.path.isdir(base) else []
    return os.path.join(base, max(versions, key=int)) if versions else None


def read_words(path):
    """The words of a file: a TSV's first column (a corpus' source side) or
    every line of a text file."""
    words = []
    with open(path, encoding="utf-8-sig") as handle:
        for line in handle:
            words.extend(line.rstrip("\r\n").split("\t")[0].split())
    return words


def warmup_words(export_dir):
    """The words of the export's warm-up requests' text inputs."""
    from keras_attention.serving.export import read_warmup_requests

    words = []
    for _, inputs in read_warmup_requests(export_dir):
        for value in inputs.values():
            array = np.asarray(value)
            if array.dtype == object:
                words.extend(w for x in array.ravel() for w in x.decode("utf-8", "replace").split())
    return words


def memory():
    """`(VmRSS, VmHWM)` of this process in MiB, from /proc/self/status."""
    values = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) / 1024  # kB
    except OSError:  # not Linux: no figures, NaN in the report
        pass
    return values.get("VmRSS", float("nan")), values.get("VmHWM", float("nan"))


def make_requests(count, max_batch, max_words, words, rng, largest_first=True):
    """`count` requests (lists of sentences) of mixed sizes; the first is
    the largest (`max_batch` sentences of `max_words` words)."""

    def sentence(length):
        return " ".join(words[i] for i in rng.integers(0, len(words), length))

    requests = []
    for index in range(count):
        if index == 0 and largest_first:
            requests.append([sentence(max_words) for _ in range(max_batch)])
            continue
        sentences = []
        for _ in range(int(rng.integers(1, max_batch + 1))):
            kind = rng.random()
            length = (
                0 if kind < 0.05 else max_words if kind < 0.10 else rng.integers(1, max_words + 1)
            )
            sentences.append(sentence(int(length)))
        requests.append(sentences)
    return requests


def drive(call, requests, threads, check, progress=None):
    """Send `requests` through `call` from `threads` threads; returns one
    record per request: `(latency seconds, error or None, check's problems)`."""
    records = [None] * len(requests)
    counter = itertools.count()
    done = itertools.count(1)
    step = max(1, len(requests) // 10)

    def worker():
        for index in iter(lambda: next(counter), None):
            if index >= len(requests):
                return
            start = time.perf_counter()
            try:
                outputs, error = call(requests[index]), None
            except Exception as caught:  # every failure is counted, none stops the run
                outputs, error = None, caught
            latency = time.perf_counter() - start
            try:
                problems = check(requests[index], outputs, error) if check else []
            except Exception as caught:  # a response the check cannot read is a problem too
                problems = [f"unreadable response: {first_line(caught)}"]
            records[index] = (latency, error, problems)
            finished = next(done)
            if progress and len(requests) >= 100 and finished % step == 0:
                progress(finished, len(requests))

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return records


def check_rows(texts, outputs, error):
    """What a good request's response must hold."""
    if error is not None:
        return []
    problems = []
    rows = {key: np.shape(value)[0] if np.ndim(value) else None for key, value in outputs.items()}
    if rows.get("translation") != len(texts):
        problems.append(f"translation has {rows.get('translation')} rows for {len(texts)}")
    problems += [
        f"{key} has {count} rows for {len(texts)}"
        for key, count in rows.items()
        if key != "translation" and count != len(texts)
    ]
    if not problems:
        translations = [
            t.decode("utf-8", "replace") if isinstance(t, bytes) else t
            for t in outputs["translation"]
        ]
        blanks = [t for text, t in zip(texts, translations) if not text.strip() and t]
        if blanks:
            problems.append(f"an empty string translated to {blanks[0]!r}")
    return problems


def first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def load_run(name, call, requests, warmup, threads, check=check_rows, log=print):
    """Warm up, read RSS, run `requests`, read RSS; the run's figures."""
    drive(call, warmup, threads, None)
    rss_warm, _ = memory()
    start = time.perf_counter()
    records = drive(
        call,
        requests,
        threads,
        check,
        progress=lambda done, total: print(
            f"  {name}: {done}/{total} requests, {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
            flush=True,
        ),
    )
    seconds = time.perf_counter() - start
    rss_end, rss_peak = memory()
    good = [r for r, request in zip(records, requests) if not isinstance(request, BadRequest)]
    bad = [(r, q) for r, q in zip(records, requests) if isinstance(q, BadRequest)]
    latencies = np.array([r[0] for r in good]) * 1e3
    errors = [first_line(r[1]) for r in good if r[1] is not None]
    problems = [p for r in good for p in r[2]]
    refused = [q for r, q in bad if r[1] is not None and q.expected in str(r[1])]
    sentences = sum(len(q) for q in requests if not isinstance(q, BadRequest))
    growth = 100.0 * (rss_end - rss_warm) / rss_warm
    report = {
        "requests": len(good),
        "sentences": sentences,
        "empty_sentences": sum(
            1 for q in requests if not isinstance(q, BadRequest) for t in q if not t
        ),
        "seconds": round(seconds, 2),
        "latency_ms": {
            "p50": round(float(np.percentile(latencies, 50)), 1),
            "p95": round(float(np.percentile(latencies, 95)), 1),
            "p99": round(float(np.percentile(latencies, 99)), 1),
            "max": round(float(latencies.max()), 1),
        },
        "sentences_per_second": round(sentences / seconds, 1),
        "requests_per_second": round(len(good) / seconds, 2),
        "rss_mib": {
            "warm": round(rss_warm, 1),
            "end": round(rss_end, 1),
            "peak": round(rss_peak, 1),
        },
        "rss_growth_percent": round(growth, 2),
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:5],
        "row_mismatches": len(problems),
        "problem_samples": sorted(set(problems))[:5],
        "bad_requests": {
            "sent": len(bad),
            "refused": len(refused),
            "kinds": sorted({q.kind for _, q in bad}),
            "answers": sorted({first_line(r[1]) for r, _ in bad if r[1] is not None})[:5],
        },
    }
    report["goal_met"] = bool(
        not errors and not problems and growth < GROWTH_GOAL and len(refused) == len(bad)
    )
    return report


class BadRequest(list):
    """A request the server must refuse: `kind`, and `expected`, a text the
    client's error must contain."""

    def __init__(self, texts, kind, expected):
        super().__init__(texts)
        self.kind, self.expected = kind, expected


BAD_KINDS = ("unknown signature", "unknown version", "text matrix")


def rest_caller(host, port, model_name, version, style):
    """A `call(request)` through the serving client's REST functions; bad
    requests go where the client lets a user send them."""
    from keras_attention_recipes.serving_client import parse_rest_response, predict_rest, rest_body

    def call(texts):
        text = np.array([t.encode("utf-8") for t in texts], dtype=object)
        if not isinstance(texts, BadRequest):
            return predict_rest(host, port, model_name, {"text": text}, "serving_default", style)
        if texts.kind == "unknown signature":
            return predict_rest(host, port, model_name, {"text": text}, "no_such_signature", style)
        if texts.kind == "text matrix":
            return predict_rest(
                host, port, model_name, {"text": text.reshape(-1, 1)}, "serving_default", style
            )
        # An unknown version: the client's URL has none, so post its body there.
        import requests

        url = f"http://{host}:{port}/v1/models/{model_name}/versions/{int(version) + 1}:predict"
        answer = requests.post(
            url, json=rest_body({"text": text}, "serving_default", style), timeout=30
        )
        if answer.status_code != 200:
            raise RuntimeError(f"{url} answered {answer.status_code}: {answer.text[:500]}")
        return parse_rest_response(answer.json())

    return call


def with_bad_requests(requests, every):
    """Every `every`-th request (from the second on) replaced by a bad one."""
    if not every:
        return requests
    expected = {
        "unknown signature": "answered 400",
        "unknown version": "answered 404",
        "text matrix": "answered 400",
    }
    out = list(requests)
    for n, index in enumerate(range(every - 1, len(out), every)):
        kind = BAD_KINDS[n % len(BAD_KINDS)]
        out[index] = BadRequest(out[index][:2], kind, expected[kind])
    return out


def machine():
    import tensorflow as tf

    info = cpu()
    return {
        "cpu": info["model"],
        "cores": info["cores"],
        "avx512f": info["isa"] == "avx512f",
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
    }


def table(report):
    lines = [
        f"{'path':<10s} {'requests':>8s} {'sent.':>7s} {'p50 ms':>8s} {'p95 ms':>8s} "
        f"{'p99 ms':>8s} {'sent/s':>7s} {'RSS warm':>9s} {'RSS end':>8s} {'growth':>7s} "
        f"{'errors':>6s} {'rows':>5s} {'bad':>7s} {'goal':>5s}"
    ]
    for name, run in report["runs"].items():
        latency, rss, bad = run["latency_ms"], run["rss_mib"], run["bad_requests"]
        lines.append(
            f"{name:<10s} {run['requests']:8d} {run['sentences']:7d} {latency['p50']:8.1f} "
            f"{latency['p95']:8.1f} {latency['p99']:8.1f} {run['sentences_per_second']:7.1f} "
            f"{rss['warm']:8.0f}M {rss['end']:7.0f}M {run['rss_growth_percent']:6.2f}% "
            f"{run['errors']:6d} {run['row_mismatches']:5d} "
            f"{bad['refused']:>3d}/{bad['sent']:<3d} {'met' if run['goal_met'] else 'MISS':>5s}"
        )
    return "\n".join(lines)


def replay_warmup_file(loaded, export_dir):
    """Run the export's own warm-up requests
    (`assets.extra/tf_serving_warmup_requests`) once, as TF Serving does
    while it loads a version (an XLA export compiles its programs there);
    `{"warmup_requests": N, "warmup_seconds": s}`."""
    from keras_attention.serving.versions import read_warmup_requests

    path = os.path.join(export_dir, "assets.extra", "tf_serving_warmup_requests")
    import tensorflow as tf

    requests = read_warmup_requests(export_dir) if os.path.exists(path) else []
    start = time.perf_counter()
    for name, inputs in requests:
        loaded.signatures[name](**{key: tf.constant(value) for key, value in inputs.items()})
    seconds = round(time.perf_counter() - start, 1)
    return {"warmup_requests": len(requests), "warmup_seconds": seconds}


def parser():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--export",
        help="a SavedModel version folder (default: the newest saved_models/translator/N)",
    )
    p.add_argument("--requests", type=int, default=10_000, help="requests per path (default 10000)")
    p.add_argument(
        "--rest-requests", type=int, help="requests of the REST path (default: --requests)"
    )
    p.add_argument("--threads", type=int, default=8, help="client threads (default 8)")
    p.add_argument(
        "--max-batch", type=int, default=64, help="most sentences in a request (default 64)"
    )
    p.add_argument(
        "--max-words", type=int, default=60, help="most words in a sentence (default 60)"
    )
    p.add_argument("--warmup", type=int, help="warm-up requests per path (default 2 x --threads)")
    p.add_argument(
        "--words",
        help=f"where words are drawn from (default {DEFAULT_WORDS}, "
        "else the export's warm-up requests)",
    )
    p.add_argument("--seed", type=int, default=0, help="the requests' random seed (default 0)")
    p.add_argument(
        "--paths",
        default="signature,rest",
        help="which runs, comma-separated: signature, rest (default both)",
    )
    p.add_argument(
        "--style",
        choices=["inputs", "instances"],
        default="inputs",
        help="REST body format (default inputs)",
    )
    p.add_argument(
        "--bad-every",
        type=int,
        default=50,
        help="every Nth REST request is a bad one (0: none; default 50)",
    )
    p.add_argument("--json", help="also write the report to this JSON file")
    return p


def check_args(p, args):
    for flag in ("requests", "rest_requests", "threads", "max_batch", "max_words", "warmup"):
        value = getattr(args, flag)
        if value is not None and value < (0 if flag == "warmup" else 1):
            p.error(f"--{flag.replace('_', '-')} must be a positive integer; received {value}")
    if args.bad_every < 0:
        p.error(f"--bad-every must be >= 0; received {args.bad_every}")
    args.paths = [name.strip() for name in args.paths.split(",") if name.strip()]
    unknown = sorted(set(args.paths) - {"signature", "rest"})
    if unknown or not args.paths:
        p.error(f"--paths takes signature and/or rest; received {','.join(unknown) or 'nothing'}")
    args.export = args.export or default_export()
    if args.export is None:
        p.error("--export: no saved_models/translator/N here; export a translator or name one")
    if not os.path.isfile(os.path.join(args.export, "saved_model.pb")):
        p.error(f"--export: no saved_model.pb in {args.export!r}")
    if args.words is None and os.path.isfile(os.path.join(ROOT, DEFAULT_WORDS)):
        args.words = os.path.join(ROOT, DEFAULT_WORDS)
    if args.words is not None and not os.path.isfile(args.words):
        p.error(f"--words: no such file {args.words!r}")
    if args.warmup is None:
        args.warmup = 2 * args.threads
    return args


def new_report(args, words):
    """The report's machine, export and settings, before any run."""
    return {
        "machine": machine(),
        "export": os.path.abspath(args.export),
        "settings": {
            "requests": args.requests,
            "rest_requests": args.rest_requests or args.requests,
            "threads": args.threads,
            "max_batch": args.max_batch,
            "max_words": args.max_words,
            "warmup": args.warmup,
            "seed": args.seed,
            "style": args.style,
            "bad_every": args.bad_every,
            "words": args.words or "the export's warm-up requests",
            "distinct_words": len(set(words)),
        },
        "runs": {},
    }


def main(argv=None):
    p = parser()
    args = check_args(p, p.parse_args(argv))
    import tensorflow as tf

    try:
        import tensorflow_text  # noqa: F401  (the tokenizers' ops, as TF Serving registers them)
    except ImportError:  # pragma: no cover
        pass

    words = read_words(args.words) if args.words else warmup_words(args.export)
    if not words:
        p.error(f"--words: no words in {args.words or 'the export warm-up requests'}")
    rng = np.random.default_rng(args.seed)
    report = new_report(args, words)
    print(
        f"{report['machine']['cpu']}, {report['machine']['cores']} cores, avx512f: "
        f"{report['machine']['avx512f']}, tensorflow {tf.__version__}; export {args.export}",
        flush=True,
    )

    def warmup():
        largest = make_requests(1, args.max_batch, args.max_words, words, rng)
        return largest * min(args.warmup, args.threads) + make_requests(
            max(0, args.warmup - args.threads), args.max_batch, args.max_words, words, rng, False
        )

    start = time.perf_counter()
    loaded = tf.saved_model.load(args.export)  # one copy, for both paths
    report["load"] = {"seconds": round(time.perf_counter() - start, 1)}
    report["load"].update(replay_warmup_file(loaded, args.export))
    print(
        f"loaded in {report['load']['seconds']} s; the export's warm-up file: "
        f"{report['load']['warmup_requests']} requests in {report['load']['warmup_seconds']} s",
        flush=True,
    )
    if "signature" in args.paths:
        signature = loaded.signatures["serving_default"]

        def call(texts):
            out = signature(text=tf.constant(texts, tf.string))
            return {key: value.numpy() for key, value in out.items()}

        requests = make_requests(args.requests, args.max_batch, args.max_words, words, rng)
        report["runs"]["signature"] = load_run("signature", call, requests, warmup(), args.threads)
    if "rest" in args.paths:
        from tests.serving_stub import ServingStub

        with ServingStub(args.export, loaded=loaded) as stub:
            call = rest_caller(stub.host, stub.port, stub.model_name, stub.version, args.style)
            requests = with_bad_requests(
                make_requests(
                    args.rest_requests or args.requests, args.max_batch, args.max_words, words, rng
                ),
                args.bad_every,
            )
            run = load_run("rest", call, requests, warmup(), args.threads)
            run["server"] = {"predict_calls": stub.calls, "error_answers": stub.errors}
            report["runs"]["rest"] = run
    print(table(report))
    for name, run in report["runs"].items():
        for sample in run["error_samples"] + run["problem_samples"]:
            print(f"{name}: {sample}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
            handle.write("\n")
    return 0 if all(run["goal_met"] for run in report["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
