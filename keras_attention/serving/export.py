"""SavedModel export for TensorFlow Serving (TensorFlow-specific).

Versions live in `<base_dir>/<model_name>/<version>/`, integer-named, the
layout `tensorflow_model_server --model_base_path=<base_dir>/<model_name>`
polls. A version is written into a temporary directory beside its target
and renamed into place, so a server never sees a half-written version and
a failed or killed export leaves the earlier versions untouched.
"""

import contextlib
import os
import shutil
import tempfile

MODELS_CONFIG = """model_config_list {{
  config {{
    name: "{name}"
    base_path: "/models/{name}"
    model_platform: "tensorflow"
  }}
}}
"""


def next_version(model_dir):
    """1 + the largest integer-named version under `model_dir` (1 if none)."""
    if not os.path.isdir(model_dir):
        return 1
    versions = [int(entry) for entry in os.listdir(model_dir) if entry.isdigit()]
    return max(versions, default=0) + 1


@contextlib.contextmanager
def atomic_version_dir(base_dir, model_name, version=None):
    """Yields `(staging, target)`: a temporary directory to write one version
    into and its final path. On success `staging` is renamed to
    `<base_dir>/<model_name>/<version>` (and a `models.config`
    example written beside the version folders); on any exception it is
    removed and nothing else changes.

    Raises `ValueError` if that version already exists.
    """
    model_dir = os.path.join(base_dir, model_name)
    os.makedirs(model_dir, exist_ok=True)
    version = next_version(model_dir) if version is None else int(version)
    target = os.path.join(model_dir, str(version))
    if os.path.exists(target):
        raise ValueError(
            f"export version {version} already exists at {target}; pick another `version` "
            "or leave it unset for the next free number."
        )
    staging = tempfile.mkdtemp(prefix=f".{version}.incomplete-", dir=model_dir)
    try:
        yield staging, target
        os.replace(staging, target)  # atomic on one filesystem
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    config = os.path.join(model_dir, "models.config")
    with open(config + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(MODELS_CONFIG.format(name=model_name))
    os.replace(config + ".tmp", config)


def export_archive(archive, base_dir, model_name, version=None, before_publish=None):
    """Write a `keras.export.ExportArchive` as the next version; returns its path.

    `before_publish(path)` may add files (assets, warm-up requests) to the
    staged version before it is renamed into place.
    """
    with atomic_version_dir(base_dir, model_name, version) as (staging, target):
        archive.write_out(staging, verbose=False)
        if before_publish is not None:
            before_publish(staging)
    return target


def translator_archive(model, source_tokenizer, target_tokenizer, max_length, beam_width=4):
    """An `ExportArchive` of a `Seq2Seq` translator with its tokenizers.

    Signatures (all with in-graph tokenisation; inputs longer than
    `max_length` pieces are truncated and flagged):

    - `serving_default`: `text` string `[batch]` -> `translation` string
      `[batch]`, `score` float `[batch]` (beam search of `beam_width`),
      `truncated` bool `[batch]`.
    - `greedy`: the same with greedy decoding.
    - `attention`: `text` -> `translation`, `attention` float `[batch,
      target_len, source_len]` of the best hypothesis, `source_tokens` and
      `target_tokens` strings.
    - `tokens`: `token_ids` int32 `[batch, source_len]` and `lengths` int32
      `[batch]` -> `token_ids` int32 `[batch, target_len]` (beam search).
    """
    import keras
    import tensorflow as tf

    from keras_attention.seq2seq.generation import generate, greedy_search

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(source_tokenizer)
    archive.track(target_tokenizer)
    decode_length = max_length + 1

    def encode(text):
        return source_tokenizer.encode(text, max_length)

    def blank_if_empty(text, translation):
        """An empty (or all-space) input translates to an empty string."""
        empty = tf.equal(tf.strings.length(source_tokenizer.clean(text)), 0)
        return tf.where(empty, tf.constant(""), translation)

    def best(source, attention=False):
        return generate(model, source, decode_length, beam_width, return_attention=attention)

    def translate(text):
        source, truncated = encode(text)
        result = best(source)
        return {
            "translation": blank_if_empty(text, target_tokenizer.decode(result["tokens"])),
            "score": result["scores"],
            "truncated": truncated,
        }

    def greedy(text):
        source, truncated = encode(text)
        result = greedy_search(model, source, decode_length)
        return {
            "translation": blank_if_empty(text, target_tokenizer.decode(result["tokens"])),
            "score": result["scores"],
            "truncated": truncated,
        }

    def attention(text):
        source, truncated = encode(text)
        result = best(source, attention=True)
        return {
            "translation": blank_if_empty(text, target_tokenizer.decode(result["tokens"])),
            "attention": result["attention"],
            "source_tokens": source_tokenizer.tokens(source),
            "target_tokens": target_tokenizer.tokens(result["tokens"]),
            "truncated": truncated,
        }

    def tokens(token_ids, lengths):
        mask = tf.sequence_mask(lengths, tf.shape(token_ids)[1])
        source = tf.where(mask, token_ids, tf.zeros_like(token_ids))
        return {"token_ids": best(source)["tokens"]}

    text_spec = [tf.TensorSpec((None,), tf.string, name="text")]
    archive.add_endpoint("serving_default", translate, input_signature=text_spec)
    archive.add_endpoint("greedy", greedy, input_signature=text_spec)
    archive.add_endpoint("attention", attention, input_signature=text_spec)
    archive.add_endpoint(
        "tokens",
        tokens,
        input_signature=[
            tf.TensorSpec((None, None), tf.int32, name="token_ids"),
            tf.TensorSpec((None,), tf.int32, name="lengths"),
        ],
    )
    return archive


def write_warmup_requests(version_dir, model_name, requests):
    """Write `assets.extra/tf_serving_warmup_requests`: one `PredictionLog`
    record per `(signature_name, {input_name: value})`, which TF Serving
    replays to warm the model up before it serves. Needs the
    tensorflow-serving-api package."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    directory = os.path.join(version_dir, "assets.extra")
    os.makedirs(directory, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(directory, "tf_serving_warmup_requests")) as writer:
        for signature, inputs in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
            )
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())


def read_warmup_requests(version_dir):
    """The `(signature_name, {input_name: numpy array})` pairs of a version's
    warm-up file."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests")
    requests = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        requests.append(
            (
                request.model_spec.signature_name,
                {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()},
            )
        )
    return requests
