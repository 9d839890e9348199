"""The recipe's export for TF Serving: the spatial transformer classifier
as a versioned SavedModel with three signatures, `serving_default` (60x60
gray images in [0, 1]), `image_bytes` (PNG, JPEG, GIF (first frame) or BMP
bytes, gray or colour, up to 4096x4096 pixels, checked from the header
before decoding) and `transformed` (what the transformer makes of an
image), and warm-up requests for each. Bad requests are refused by graph
asserts whose first line names the input."""

import numpy as np

from .data import CANVAS

# The largest width or height the `image_bytes` signature decodes: a bigger
# declared size is refused from the header (a 16000x16000 PNG of a few KB
# would otherwise cost seconds and hundreds of MB per request).
MAX_IMAGE_SIDE = 4096
# ITU-R BT.601 luma weights (those of tf.image.rgb_to_grayscale), scaled to
# sum to 1 so that a gray image keeps its values exactly.
LUMA = [0.2989 / 0.9999, 0.5870 / 0.9999, 0.1140 / 0.9999]


def declared_image_size(data):
    """`(width, height)` int64 scalars that the header of the image `data`
    (a scalar string) declares, read with string ops before any decoding:

        PNG   bytes 16..23, IHDR width and height, big-endian uint32
        GIF   bytes 6..9, logical screen width and height, little-endian uint16
        BMP   bytes 18..25, width and height, little-endian int32 (height
              negative for a top-down bitmap)
        JPEG  the start-of-frame marker, via `tf.image.extract_jpeg_shape`

    Raises `InvalidArgumentError` (a graph assert) for any other format.
    """
    import tensorflow as tf

    # 26 header bytes, zero-padded so that short input still slices cleanly.
    header = tf.strings.substr(tf.strings.join([tf.strings.substr(data, 0, 26), "\0" * 26]), 0, 26)

    def starts_with(magic):
        return tf.equal(tf.strings.substr(header, 0, len(magic)), magic)

    def numbers(position, length, dtype, little_endian):
        raw = tf.io.decode_raw(tf.strings.substr(header, position, length), dtype, little_endian)
        return tf.cast(raw, tf.int64)

    png = numbers(16, 8, tf.int32, little_endian=False)
    png = tf.where(png < 0, png + 2**32, png)  # uint32 read as int32
    gif = numbers(6, 4, tf.uint16, little_endian=True)
    bmp = tf.abs(numbers(18, 8, tf.int32, little_endian=True))
    is_png, is_gif, is_bmp, is_jpeg = (
        starts_with(b"\x89PNG\r\n\x1a\n"),
        starts_with(b"GIF8"),
        starts_with(b"BM"),
        starts_with(b"\xff\xd8\xff"),
    )
    known = tf.reduce_any(tf.stack([is_png, is_gif, is_bmp, is_jpeg]))
    with tf.control_dependencies(
        [tf.debugging.Assert(known, ["image_bytes: an image must be PNG, JPEG, GIF or BMP"])]
    ):
        size = tf.where(is_png, png, tf.where(is_gif, gif, bmp))
    size = tf.cond(
        is_jpeg,
        lambda: tf.cast(tf.image.extract_jpeg_shape(data)[1::-1], tf.int64),  # (h, w, c) -> (w, h)
        lambda: size,
    )
    return size[0], size[1]


def checked(image):
    """`image` once graph asserts have refused a wrong shape or channel
    count, NaN or infinite pixels, and pixels outside [0, 1]: TF Serving
    returns the assert's message, whose first line names the input."""
    import tensorflow as tf

    from keras_attention.serving.requests import has_shape, refuse_unless, shape_string

    # `has_shape` compares the shape tensor itself: the rank would be
    # folded to the signature's 4 before a request comes.
    shape_check = refuse_unless(
        has_shape(image, 4, (None, CANVAS, CANVAS, 1)),
        f"image must have shape [batch, {CANVAS}, {CANVAS}, 1] (gray pixels in [0, 1]; "
        "colour or encoded images go to the image_bytes signature); got ",
        shape_string(tf.shape(image, out_type=tf.int64)),
    )
    with tf.control_dependencies([shape_check]):
        image = tf.identity(image)
    non_finite = tf.reduce_sum(tf.cast(tf.logical_not(tf.math.is_finite(image)), tf.int64))
    finite_check = tf.debugging.Assert(
        tf.equal(non_finite, 0),
        [
            tf.strings.format(
                "image must hold finite pixel values; got {} NaN or infinite pixels",
                non_finite,
            )
        ],
    )
    with tf.control_dependencies([finite_check]):
        low, high = tf.reduce_min(image), tf.reduce_max(image)
        range_check = tf.debugging.Assert(
            tf.logical_or(tf.equal(tf.size(image), 0), tf.logical_and(low >= 0.0, high <= 1.0)),
            [
                tf.strings.format(
                    "image must hold pixel values in [0, 1] (8-bit pixels divided by 255); "
                    "got values from {} to {}",
                    (low, high),
                )
            ],
        )
    with tf.control_dependencies([range_check]):
        return tf.ensure_shape(tf.identity(image), (None, CANVAS, CANVAS, 1))


def decoded(data):
    """PNG, JPEG, GIF (first frame) or BMP bytes -> a (60, 60, 1) image
    in [0, 1]; colour becomes gray by BT.601 luma. An image that declares
    more than `MAX_IMAGE_SIDE` pixels a side is refused before decoding."""
    import tensorflow as tf

    width, height = declared_image_size(data)
    checks = [
        tf.debugging.Assert(
            tf.logical_and(width <= MAX_IMAGE_SIDE, height <= MAX_IMAGE_SIDE),
            [
                tf.strings.format(
                    "image_bytes: the image declares {}x{} pixels (width x height); at most "
                    f"{MAX_IMAGE_SIDE}x{MAX_IMAGE_SIDE} is accepted",
                    (width, height),
                )
            ],
        )
    ]
    with tf.control_dependencies(checks):  # before the decoder allocates anything
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
    gray = tf.tensordot(tf.cast(image, tf.float32) / 255.0, LUMA, axes=[[2], [0]])
    image = tf.image.resize(gray[..., None], (CANVAS, CANVAS))
    return tf.ensure_shape(image, (CANVAS, CANVAS, 1))


def classifying(model):
    """`predict(image)`: `model`'s probabilities and class of each image."""
    import tensorflow as tf

    from keras_attention.serving.graph import empty_batch_as_one_row

    def classify(image):
        probabilities = model(image, training=False)
        return {
            "probabilities": probabilities,
            "class": tf.argmax(probabilities, axis=-1, output_type=tf.int32),
        }

    # An empty batch runs as one blank image: TensorFlow's oneDNN Conv2D on
    # AVX-512 CPUs fails on a batch of 0 between stacked convolutions.
    return empty_batch_as_one_row(classify, tf.zeros((1, CANVAS, CANVAS, 1)))


def warmup_requests(examples):
    """A warm-up request for each signature, from the first four `examples`."""
    import tensorflow as tf

    images = examples[:4].astype("float32")
    pngs = np.array(
        [tf.io.encode_png(tf.cast(tf.round(image * 255), tf.uint8)).numpy() for image in images],
        dtype=object,
    )
    return [
        ("serving_default", {"image": images}),
        ("image_bytes", {"image_bytes": pngs}),
        ("transformed", {"image": images[:1]}),
    ]


def export(model, warp, args, examples):
    """Export `model` (the spatial transformer classifier) and `warp` (its
    transformer's image) to `args.export_dir`/`args.model_name`/<version>,
    with warm-up requests made from `examples`; returns the version's path."""
    import keras
    import tensorflow as tf

    from keras_attention.serving.versions import (
        export_archive,
        traced_once,
        write_warmup_requests,
    )

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(warp)
    image_spec = tf.TensorSpec((None, CANVAS, CANVAS, 1), tf.float32, name="image")
    predict = classifying(model)

    def endpoint(body, spec):  # traced once, not again by the save (`traced_once`)
        return traced_once(tf.function(body, input_signature=[spec], autograph=False))

    archive.add_endpoint(
        "serving_default", endpoint(lambda image: predict(checked(image)), image_spec)
    )
    archive.add_endpoint(
        "image_bytes",
        endpoint(
            lambda image_bytes: predict(
                tf.map_fn(
                    decoded,
                    image_bytes,
                    fn_output_signature=tf.TensorSpec((CANVAS, CANVAS, 1), tf.float32),
                )
            ),
            tf.TensorSpec((None,), tf.string, name="image_bytes"),
        ),
    )
    archive.add_endpoint(
        "transformed",
        endpoint(lambda image: {"transformed": warp(checked(image), training=False)}, image_spec),
    )
    warmup = warmup_requests(examples)
    return export_archive(
        archive,
        args.export_dir,
        args.model_name,
        before_publish=lambda staging: write_warmup_requests(staging, args.model_name, warmup),
    )
