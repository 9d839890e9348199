"""Check that an export loads in a given TF Serving release (TensorFlow-specific).

There is no TF Serving for every TensorFlow: exports written by a newer
TensorFlow run on an older server only if every graph node's op is
registered there and sets only attributes that op declares. A node of op
`o` with attributes `A` runs on a release with op list `L` (see
`oplists/generate.py`) when

    o in L  and  A <= attrs(L[o])  and  required(L[o]) <= A

where `A` leaves out internal attributes (named `_...`, which TensorFlow
does not validate) and `required` are those without a default value. TensorFlow
writes SavedModels with default-valued attributes stripped (recorded in
`meta_info_def.stripped_default_attrs`), so an attribute a newer
TensorFlow added with a default does not appear unless a node sets it to
another value. Nodes of the main graph and of every library function are
checked; a node whose op is a library function (a call) is not an op.

    python -m keras_attention.serving.check EXPORT_DIR [--serving 2.20 [--serving 2.19 ...]]

prints a verdict per release and exits with status 1 if any fails. For
an XLA export (`Translator.export(..., xla=True)`) it also prints which
signatures call functions that must compile with XLA (attribute
`_XlaMustCompile`), which TF Serving runs only when started with
`--xla_cpu_compilation_enabled=true` (`must_compile`).
"""

import argparse
import json
import os
import sys

OPLISTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oplists")


def available_servings():
    """The release series with a committed op list, oldest first."""
    names = [
        name[len("tf_serving_") : -len(".json")]
        for name in os.listdir(OPLISTS)
        if name.startswith("tf_serving_") and name.endswith(".json")
    ]
    return sorted(names, key=lambda name: tuple(int(part) for part in name.split(".")))


def load_oplist(serving):
    """The op list of release series `serving` ("2.20"): a dict with
    `servers`, `tensorflow`, `tensorflow_text` and `ops` mapping each op name
    to `(attribute names, names of those without a default)`."""
    known = available_servings()
    if serving not in known:
        raise ValueError(
            f"`serving` must be one of the releases with an op list, {known}; got {serving!r}"
        )
    with open(os.path.join(OPLISTS, f"tf_serving_{serving}.json"), encoding="utf-8") as handle:
        oplist = json.load(handle)
    oplist["ops"] = {
        name: (
            {attr.rstrip("=") for attr in attrs},
            {attr for attr in attrs if not attr.endswith("=")},
        )
        for name, attrs in oplist["ops"].items()
    }
    return oplist


def read_saved_model(export_dir):
    """The `SavedModel` proto of `export_dir`."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(export_dir, "saved_model.pb")
    if not os.path.isfile(path):
        raise ValueError(
            f"`export_dir` must be a SavedModel directory holding saved_model.pb; "
            f"got {export_dir!r}, where {path} does not exist"
        )
    proto = saved_model_pb2.SavedModel()
    with open(path, "rb") as handle:
        proto.ParseFromString(handle.read())
    return proto


def graph_nodes(saved_model):
    """`(where, node)` for every node of every meta graph: `where` is
    "main graph" or "function <name>". Calls of library functions are left
    out: their bodies are listed as functions."""
    for meta_graph in saved_model.meta_graphs:
        graph = meta_graph.graph_def
        functions = {function.signature.name for function in graph.library.function}
        for node in graph.node:
            if node.op not in functions:
                yield "main graph", node
        for function in graph.library.function:
            for node in function.node_def:
                if node.op not in functions:
                    yield f"function {function.signature.name}", node


def op_types(saved_model):
    """The sorted op names an export's graphs use."""
    return sorted({node.op for _, node in graph_nodes(saved_model)})


def _called(function_or_node_attrs):
    """The names of the library functions a node's attributes name (`f`,
    branches, loop bodies)."""
    for value in function_or_node_attrs.values():
        if value.HasField("func"):
            yield value.func.name
        elif value.HasField("list"):
            yield from (function.name for function in value.list.func)


def must_compile(saved_model):
    """`{signature: sorted names of the library functions it reaches that
    carry _XlaMustCompile=true}`, only the signatures that reach one:
    what stock TF Serving refuses to run without
    `--xla_cpu_compilation_enabled=true`."""
    found = {}
    for meta_graph in saved_model.meta_graphs:
        graph = meta_graph.graph_def
        library = {function.signature.name: function for function in graph.library.function}
        calls = {
            name: {
                called
                for node in function.node_def
                for called in [node.op, *_called(node.attr)]
                if called in library
            }
            for name, function in library.items()
        }
        nodes = {node.name: node for node in graph.node}
        for signature, definition in meta_graph.signature_def.items():
            roots = {
                called
                for output in definition.outputs.values()
                for called in _called(nodes[output.name.split(":")[0]].attr)
                if output.name.split(":")[0] in nodes and called in library
            }
            reached, pending = set(), list(roots)
            while pending:
                name = pending.pop()
                if name not in reached:
                    reached.add(name)
                    pending.extend(calls[name])
            compiled = sorted(
                name
                for name in reached
                if "_XlaMustCompile" in library[name].attr
                and library[name].attr["_XlaMustCompile"].b
            )
            if compiled:
                found[signature] = compiled
    return found


def problems(saved_model, oplist):
    """What stops the release of `oplist` from loading `saved_model`: one
    line per unknown op, unknown attribute or missing required attribute,
    naming the node and where it is (the first occurrence of each)."""
    found = {}
    for meta_graph in saved_model.meta_graphs:
        if not meta_graph.meta_info_def.stripped_default_attrs:
            found["unstripped"] = (
                "written without stripping default-valued attributes "
                "(tf.saved_model.save strips them; do not pass a graph written otherwise)"
            )
    for where, node in graph_nodes(saved_model):
        if node.op not in oplist["ops"]:
            found.setdefault(
                ("op", node.op), f"unknown op {node.op} (node {node.name!r} in {where})"
            )
            continue
        attrs, required = oplist["ops"][node.op]
        # Names starting with "_" are internal (shapes, placement hints):
        # TensorFlow's node validation skips them.
        set_attrs = {attr for attr in node.attr if not attr.startswith("_")}
        for attr in sorted(set_attrs - attrs):
            found.setdefault(
                ("attr", node.op, attr),
                f"op {node.op} has no attribute {attr!r} there (node {node.name!r} in {where})",
            )
        for attr in sorted(required - set_attrs):
            found.setdefault(
                ("required", node.op, attr),
                f"op {node.op} needs attribute {attr!r}, which the node lacks "
                f"(node {node.name!r} in {where})",
            )
    return list(found.values())


def check_export(export_dir, servings=None):
    """`{serving: [problem, ...]}` for each release series in `servings`
    (default: all with an op list); an empty list means it loads."""
    saved_model = read_saved_model(export_dir)
    servings = available_servings() if servings is None else list(servings)
    return {serving: problems(saved_model, load_oplist(serving)) for serving in servings}


def report(export_dir, servings=None, log=print):
    """Print the verdict for each release; returns True if all pass."""
    saved_model = read_saved_model(export_dir)
    servings = available_servings() if servings is None else list(servings)
    functions = sum(len(g.graph_def.library.function) for g in saved_model.meta_graphs)
    log(
        f"{export_dir}: {len(op_types(saved_model))} op types in the main graph "
        f"and {functions} functions"
    )
    compiled = must_compile(saved_model)
    if compiled:
        count = len(set().union(*compiled.values()))
        log(
            f"needs --xla_cpu_compilation_enabled=true: {count} functions must compile with "
            f"XLA, in signatures {', '.join(sorted(compiled))}"
        )
    passed = True
    for serving in servings:
        oplist = load_oplist(serving)
        found = problems(saved_model, oplist)
        runtime = (
            f"TF Serving {oplist['servers']} (TensorFlow {oplist['tensorflow']}, "
            f"TensorFlow Text {oplist['tensorflow_text']})"
        )
        if found:
            passed = False
            log(f"FAIL {runtime}: {len(found)} problem(s)")
            for line in found:
                log(f"  {line}")
        else:
            log(f"ok   {runtime}: every op and attribute is known")
    return passed


def main(argv=None):
    """`python -m keras_attention.serving.check EXPORT_DIR [--serving 2.20 ...]`
    (`--serving` takes one release and may be repeated, before or after the
    directory; default: every release with an op list):
    prints `ok` or `FAIL` per TF Serving release and returns the exit status,
    0 when every release knows every op and attribute, else 1."""
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.serving.check",
        description="Check that an export's ops and attributes exist in TF Serving releases.",
    )
    parser.add_argument("export_dir", help="a SavedModel version directory")
    known = available_servings()
    parser.add_argument(
        "--serving",
        action="append",
        metavar="VERSION",
        help=f"a release series to check against, one of {known}; repeat the flag "
        "for several (default: all)",
    )
    args = parser.parse_args(argv)
    # One value per flag (not nargs="+"), so that `--serving 2.20 DIR` leaves
    # DIR to the positional argument.
    args.serving = list(dict.fromkeys(args.serving)) if args.serving else known
    unknown = [serving for serving in args.serving if serving not in known]
    if unknown:
        parser.error(f"--serving must be among {known}; got {' '.join(unknown)}")
    from google.protobuf.message import DecodeError

    try:
        passed = report(args.export_dir, args.serving)
    except ValueError as error:
        parser.error(str(error).replace("`export_dir`", "EXPORT_DIR"))
    except DecodeError as error:  # a truncated or foreign saved_model.pb
        parser.error(f"EXPORT_DIR {args.export_dir}: cannot read saved_model.pb ({error})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
