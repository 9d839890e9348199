"""Checks of a served request's inputs inside the graph (TensorFlow-specific).

TF Serving feeds a signature whatever a request holds: it checks neither
the shapes of the signature (a `[batch]` input may come as a matrix or a
scalar) nor any value. So an export checks them itself, with core
TensorFlow ops only (`Assert`; no `py_function`, which TF Serving cannot
run), and the message TF Serving returns must say what is wrong in its
FIRST line, naming the input and the rule, e.g.

    assertion failed: [text must be a vector of strings [batch]; got shape [2, 2]]

(`Assert` writes `assertion failed: [` and `]` around its message; TF
Serving, and `error.message` of the `InvalidArgumentError` a loaded
signature raises, put nothing before it; TensorFlow's Python wrapper of a
graph function prepends `Graph execution error:` and a trace, which
`rule_line` skips.)

A rank cannot be checked with `tf.rank`: the signature's shape makes it a
constant that TensorFlow folds before a request comes. The shape tensor
itself is not folded, so `has_shape` pads it with -1 and compares
positions.
"""

import re

import tensorflow as tf


def refuse_unless(condition, *message):
    """An `Assert` op: fails with the message `message` (Python strings
    and scalar string tensors, joined) unless `condition` holds. Run it
    before what it guards (`tf.control_dependencies`)."""
    return tf.debugging.Assert(condition, [tf.strings.join(list(message))])


def shape_string(shape):
    """`"[2, 2]"` from an int vector of dimensions (`"[]"` for a scalar)."""
    return tf.strings.join(
        ["[", tf.strings.reduce_join(tf.strings.as_string(shape), separator=", "), "]"]
    )


def has_shape(value, rank, dims=None):
    """A scalar bool: `value` has rank `rank` (and, if `dims` is given,
    those dimensions, None for any), computed from its shape tensor so that
    TensorFlow cannot fold it to the signature's rank."""
    shape = tf.shape(value, out_type=tf.int64)
    padded = tf.concat([shape, tf.fill([rank + 1], tf.constant(-1, tf.int64))], 0)
    checks = [tf.reduce_all(padded[:rank] >= 0), tf.equal(padded[rank], -1)]
    for axis, dim in enumerate(dims or ()):
        if dim is not None:
            checks.append(tf.equal(padded[axis], dim))
    return tf.reduce_all(tf.stack(checks))


def checked_shape(value, name, rank, rule):
    """`value` once an `Assert` has refused another rank: `<name> must be
    <rule>; got shape [...]`. The returned tensor has the static rank."""
    check = refuse_unless(
        has_shape(value, rank),
        f"{name} must be {rule}; got shape ",
        shape_string(tf.shape(value, out_type=tf.int64)),
    )
    with tf.control_dependencies([check]):
        return tf.ensure_shape(tf.identity(value), [None] * rank)


def checked_count(value, rows, rule, counted, per):
    """`value` once an `Assert` has refused a first dimension other than
    `rows`: `<rule>; got <n> <counted> for <rows> <per>`."""
    count = tf.shape(value)[0]
    check = refuse_unless(
        tf.equal(count, rows),
        f"{rule}; got ",
        tf.strings.as_string(count),
        f" {counted} for ",
        tf.strings.as_string(rows),
        f" {per}",
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


def rule_line(message):
    """The first line of an `InvalidArgumentError`'s message that states a
    rule (the `Assert` line, without TensorFlow's `{{node ...}}` tags):
    what a client of TF Serving reads first. The whole first line when no
    `Assert` failed."""
    lines = str(message).splitlines()
    found = next(
        (line for line in lines if "assertion failed: [" in line), lines[0] if lines else ""
    )
    found = found[found.find("assertion failed: [") :] if "assertion failed: [" in found else found
    return re.sub(r"\s*\{\{[^}]*\}\}", "", found).strip()


def rule_text(message):
    """`rule_line` without `Assert`'s `assertion failed: [` ... `]`: the
    rule itself, for an in-process `ValueError`."""
    line = rule_line(message)
    prefix = "assertion failed: ["
    if line.startswith(prefix) and line.endswith("]"):
        return line[len(prefix) : -1]
    return line


__all__ = ["checked_shape", "has_shape", "refuse_unless", "rule_line", "rule_text", "shape_string"]
