"""Our side of `bench/decoding.py`: the searches as functions and as
SavedModel endpoints, on a model that never ends a row early
(`ForcedLength`), the check that every row ran its full length, and the op
count of a search's while-loop body: in the traced graph (`loop_body_ops`)
and in the program XLA compiles (`compiled_loop_kernels`)."""

import collections
import re

import keras
import numpy as np
import tensorflow as tf

from keras_attention.seq2seq import BeamSearch, GreedySearch, shortlisted_search
from keras_attention.seq2seq.generation import beam_search, greedy_search
from keras_attention.serving.records import variables_bytes
from keras_attention.serving.versions import export_archive, traced_once

NEGATIVE = -1e9


class ForcedLength(keras.layers.Layer):
    """A `Seq2Seq` that never emits `<eos>` or `<pad>`: `model` with -1e9
    added to those logits, so every hypothesis runs to `max_length` (until
    generation takes `min_length` / `suppress_tokens` options). A Keras
    layer holding `model`, so that a search finds an int8 model's layers
    through it (`quantization.dequantized`) as it does through the model."""

    def __init__(self, model):
        super().__init__(name="forced_length")
        self.model = model
        self.sos_id, self.eos_id, self.padding_id = model.sos_id, model.eos_id, model.padding_id
        self.source_vocab_size = model.source_vocab_size
        self.target_vocab_size = model.target_vocab_size
        banned = np.zeros((model.target_vocab_size,), "float32")
        banned[[model.eos_id, model.padding_id]] = NEGATIVE
        self.bias = tf.constant(banned)

    def encode(self, source, max_length=None):
        return self.model.encode(source, max_length=max_length)

    def decode_step(self, tokens, state):
        logits, state, attention = self.model.decode_step(tokens, state)
        return logits + self.bias, state, attention

    # A vocabulary shortlist's hooks (`seq2seq.shortlist`): the same bias
    # on the listed columns.
    def decode_features(self, tokens, state):
        return self.model.decode_features(tokens, state)

    def output_columns(self, columns):
        project, bias = self.model.output_columns(columns), tf.gather(self.bias, columns)
        return lambda features: project(features) + bias

    def reorder_state(self, state, indices):
        return self.model.reorder_state(state, indices)

    def reorder_beams(self, state, indices):
        return self.model.reorder_beams(state, indices)


def loop_body_ops(fn, *args):
    """`(nodes, Counter of op types)` of the while-loop body of the graph
    `fn` (a `tf.function`) traces for `args`: what one step runs, before
    Grappler's rewrites (constants included). The largest while loop's, if
    there are several."""
    graph = fn.get_concrete_function(*args).graph.as_graph_def()
    library = {function.signature.name: function for function in graph.library.function}
    bodies = [
        library[node.attr["body"].func.name]
        for node in graph.node
        if node.op in ("While", "StatelessWhile")
    ]
    body = max(bodies, key=lambda function: len(function.node_def))
    return len(body.node_def), collections.Counter(node.op for node in body.node_def)


# Instructions of an optimized HLO computation that launch no kernel.
NOT_KERNELS = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast")


def compiled_loop_kernels(fn, *args):
    """`(kernels, Counter)` of the largest while-loop body of the program XLA
    compiles for `fn` (a `jit_compile` `tf.function`) at `args`: the
    instructions of one step that run as kernels (fusions, dots, copies,
    ...; not parameters, constants, tuple accesses or bitcasts), by opcode,
    plus `"sine/cosine"`, the sines and cosines anywhere in the program.
    On CPU each kernel is a thunk with a fixed cost, which is what a small
    model's step is made of."""
    hlo = fn.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    computations = re.split(r"\n(?=%|ENTRY )", hlo)
    bodies = {}
    for computation in computations:
        name = computation.split(" ", 1)[0].lstrip("%")
        if re.search(r"body=%" + re.escape(name) + r"\b", hlo):
            ops = re.findall(
                r"^\s+(?:ROOT )?%\S+ = (?:\([^=]*?\)|\S+) ([a-z][\w-]*)\(", computation, flags=re.M
            )
            bodies[name] = collections.Counter(op for op in ops if op not in NOT_KERNELS)
    body = max(bodies.values(), key=lambda ops: sum(ops.values()))
    body["sine/cosine"] = hlo.count(" sine(") + hlo.count(" cosine(")
    return sum(count for op, count in body.items() if op != "sine/cosine"), body


def searches(model, length, shortlist=None):
    """`{"greedy": fn, "beam4": fn}`: source (B, S) -> tokens (B, L); with
    a `Shortlist`, each over the pieces it lists (`shortlisted_search`)."""
    forced = ForcedLength(model)
    if shortlist is not None:

        def over(search):
            def run(source):
                return shortlisted_search(search, forced, shortlist, source, best=True)["tokens"]

            return run

        greedy, beam = GreedySearch(max_length=length), BeamSearch(beam_width=4, max_length=length)
        return {"greedy": over(greedy), "beam4": over(beam)}
    return {
        "greedy": lambda source: greedy_search(forced, source, length)["tokens"],
        "beam4": lambda source: beam_search(forced, source, length, beam_width=4)["tokens"][:, 0],
    }


def export_searches(model, length, directory, xla=False, shortlist=None):
    """Write the two searches as SavedModel endpoints with the library's
    exporter; returns the loaded SavedModel. With `xla`, each endpoint calls
    its search as a `jit_compile=True` function (an XLA export's layout:
    the search compiled, the endpoint a plain graph around it); with a
    `shortlist`, the searches over it."""
    archive = keras.export.ExportArchive()
    spec = [tf.TensorSpec((None, None), tf.int32, name="token_ids")]
    for name, search in searches(model, length, shortlist).items():
        if xla:
            search = tf.function(search, autograph=False, jit_compile=True)
        archive.add_endpoint(
            name, traced_once(tf.function(search, input_signature=spec, autograph=False))
        )
    path = export_archive(archive, directory, "decoding_bench")
    loaded = tf.saved_model.load(path)
    loaded.variables_bytes = variables_bytes(path)
    return loaded


def check_lengths(name, tokens, batch, length, model):
    """Every row holds `length` tokens, none `<eos>` or `<pad>` (raised,
    not asserted, so `python -O` keeps the check)."""
    tokens = np.asarray(tokens)
    if tokens.shape != (batch, length):
        raise AssertionError(f"{name}: tokens of shape {tokens.shape}, not {(batch, length)}")
    if np.isin(tokens, [model.eos_id, model.padding_id]).any():
        raise AssertionError(f"{name}: a row ended before {length} tokens")
