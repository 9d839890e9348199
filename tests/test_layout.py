"""The tiers hold: layers <- seq2seq <- serving, never upwards, with
`tokenizers/` (TensorFlow, no model) and `training/` (over seq2seq) beside
them, below serving; no module takes names from the package's `__init__`;
TensorFlow is imported only in `serving/`, `tokenizers/` and `training/`."""

import ast
import importlib.util
import os

import pytest

PACKAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras_attention"
)


def modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, os.path.dirname(PACKAGE)), path


def imported(path):
    """(module, names) for every import in the file, anywhere in it."""
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, tuple(alias.name for alias in node.names)


def tier(relative):
    if relative == os.path.join("keras_attention", "__init__.py"):
        return "facade"  # re-exports the layers and seq2seq names; never serving
    parts = relative.split(os.sep)
    return parts[1] if len(parts) > 2 else "layers"


def test_the_files_are_where_the_tiers_say():
    found = {tier(relative) for relative, _ in modules()}
    assert found == {"facade", "layers", "seq2seq", "serving", "tokenizers", "training"}


@pytest.mark.parametrize("relative,path", sorted(modules()))
def test_imports_point_down_only(relative, path):
    above = ("keras_attention.serving", "keras_attention.tokenizers", "keras_attention.training")
    forbidden = {
        "layers": ("keras_attention.seq2seq", *above, "tensorflow"),
        "seq2seq": (*above, "tensorflow"),
        "facade": (*above, "tensorflow"),
        # TensorFlow's tokenizers know no model, no training and no export.
        "tokenizers": (
            "keras_attention.seq2seq",
            "keras_attention.serving",
            "keras_attention.training",
        ),
        # Training support: the models' tier below it, never the tokenizers or export.
        "training": ("keras_attention.serving", "keras_attention.tokenizers"),
        "serving": (),
    }[tier(relative)]
    for module, names in imported(path):
        assert not module.startswith(forbidden), f"{relative} imports {module}"
        if module == "keras_attention" and not relative.endswith("__init__.py"):
            # Only submodules, never the names __init__ re-exports.
            for name in names:
                assert os.path.exists(os.path.join(PACKAGE, f"{name}.py")) or os.path.isdir(
                    os.path.join(PACKAGE, name)
                ), f"{relative} imports {name} from keras_attention/__init__"


# The tokenizers' modules that need no TensorFlow: the Python twins of the
# in-graph ones, for the recipe's data on JAX and PyTorch.
PYTHON_TOKENIZERS = ("characters.py", "number_rules.py", "pieces.py")


@pytest.mark.parametrize("name", PYTHON_TOKENIZERS)
def test_the_python_tokenizers_import_no_tensorflow(name):
    path = os.path.join(PACKAGE, "tokenizers", name)
    python = tuple(f"keras_attention.tokenizers.{n[: -len('.py')]}" for n in PYTHON_TOKENIZERS)
    for module, _ in imported(path):
        assert not module.startswith(("tensorflow", "tensorflow_text")), f"{name} imports {module}"
        if module.startswith("keras_attention.tokenizers"):
            assert module in python, f"{name} imports {module}, which needs TensorFlow"


# The translation recipe's modules that read a run's prepared data on any
# backend: the shard set and its batches.
RECIPE_WITHOUT_TENSORFLOW = ("shards.py", "batches.py")


@pytest.mark.parametrize("name", RECIPE_WITHOUT_TENSORFLOW)
def test_the_recipe_s_shards_and_batches_import_no_tensorflow(name):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "recipes", "translation", name)
    for module, _ in imported(path):
        assert not module.startswith(("tensorflow", "tensorflow_text")), f"{name} imports {module}"
        if module.startswith("keras_attention.tokenizers"):
            assert module.removeprefix("keras_attention.tokenizers.") + ".py" in PYTHON_TOKENIZERS


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is not None,
    reason="TensorFlow is installed here; the JAX/PyTorch runs check this",
)
def test_without_tensorflow_the_serving_and_tokenizer_tiers_name_what_is_missing():
    import sys

    import keras_attention  # noqa: F401

    assert "tensorflow" not in sys.modules
    with pytest.raises(
        ImportError,
        match=r"keras_attention.serving needs TensorFlow .*"
        r"pip install keras_attention\[tensorflow\]",
    ):
        import keras_attention.serving  # noqa: F401
    # The tokenizers' Python twins import; an in-graph name says what is missing.
    from keras_attention.tokenizers import SentencePieceEncoder, number_rules  # noqa: F401

    with pytest.raises(
        ImportError,
        match=r"keras_attention.tokenizers.SentencePieceTokenizer needs TensorFlow .*"
        r"pip install keras_attention\[tensorflow\]",
    ):
        from keras_attention.tokenizers import SentencePieceTokenizer  # noqa: F401
    # Training support imports on every backend (a no-op off TensorFlow).
    from keras_attention.training.distribute import adapt_for_distribution  # noqa: F401

    assert "tensorflow" not in sys.modules


def module_name(relative):
    """keras_attention/seq2seq/beam.py -> keras_attention.seq2seq.beam; a
    package's __init__.py is the package's own name."""
    parts = relative[: -len(".py")].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph():
    """module -> the package modules it imports, at module level or inside a
    function alike (a function-level import is a cycle waiting for its caller).

    How package `__init__`s count: `from keras_attention.x import y` is an
    edge to the module `keras_attention.x.y` when that is a module, and to
    `keras_attention.x` (its `__init__`, for a package) when `y` is a name
    defined there. The parent packages Python initialises before any
    submodule are *not* edges: a package's `__init__` is always entered
    first, and when it is the one importing its submodules it already sits
    in `sys.modules`, so that implicit step never runs a module body twice.
    So an `__init__` re-exporting its submodules is no cycle by itself, but
    a submodule taking a name from its package's `__init__` closes one (and
    `test_imports_point_down_only` forbids it as well)."""
    known = {module_name(relative): path for relative, path in modules()}
    packages = {
        module_name(relative) for relative, _ in modules() if relative.endswith("__init__.py")
    }
    graph = {}
    for name, path in known.items():
        edges = set()
        # The package a relative import is relative to.
        here = name if name in packages else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in known)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        edges.add(f"{base}.{alias.name}")
                    elif base in known:
                        edges.add(base)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_and_package_imports():
    graph = import_graph()
    # __init__ re-exports its submodules: edges from the package to them.
    assert "keras_attention.seq2seq.transformer" in graph["keras_attention.seq2seq"]
    assert "keras_attention.seq2seq" in graph["keras_attention"]
    assert "keras_attention.validation" in graph["keras_attention.additive"]


def test_no_import_cycle_inside_the_package():
    """No module imports, directly or through others, a module that imports
    it back, whether the imports sit at module level or inside functions."""
    assert cycles(import_graph()) == []


def test_every_folder_of_the_package_is_packaged_without_deprecated_metadata():
    """What `pip install` builds from pyproject.toml: every folder under
    keras_attention/ and recipes/ that holds files, modules or data (the
    test sets), is a listed package (a folder setuptools would install only
    as data is deprecated: "Package would be ignored", a screen of it), each
    package-data pattern matches files, and the license is an SPDX string
    (a license table and license classifiers are deprecated: warnings)."""
    tomllib = pytest.importorskip("tomllib")
    root = os.path.dirname(PACKAGE)
    with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
        config = tomllib.load(handle)
    project, setuptools = config["project"], config["tool"]["setuptools"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    folders = {"keras_attention": "keras_attention", "recipes": "keras_attention_recipes"}
    expected = set()
    for top, name in folders.items():
        for folder, subfolders, files in os.walk(os.path.join(root, top)):
            subfolders[:] = [s for s in subfolders if s != "__pycache__"]
            relative = os.path.relpath(folder, os.path.join(root, top))
            if files:
                expected.add(name if relative == "." else f"{name}.{relative.replace(os.sep, '.')}")
    assert expected == set(setuptools["packages"])
    import glob

    for package, patterns in setuptools["package-data"].items():
        top, *rest = package.split(".")
        folder = os.path.join(root, setuptools["package-dir"].get(top, top), *rest)
        for pattern in patterns:
            assert glob.glob(os.path.join(folder, pattern)), (package, pattern)


# The recipes and the benchmarks: the same rule (no import cycle, counting
# function-level imports), and no recipe reaching into another's modules.

ROOT = os.path.dirname(PACKAGE)
# Below every recipe: the command lines' errors and checks, and the names
# of the two modules below it (runs.py), files written whole (run_files.py),
# run folders (run_folders.py), the KerasTuner interface (tuning.py) and its
# chief-and-workers launcher (distributed_tuning.py). They import no recipe.
PLUMBING = (
    "recipes",
    "recipes.run_files",
    "recipes.run_folders",
    "recipes.runs",
    "recipes.tuning",
    "recipes.distributed_tuning",
)
# The translation recipe's modules, each importing only those before it
# (the command line last; gpu_check, the recipe's GPU check, drives it).
TRANSLATION = (
    "recipes.translation",
    "recipes.translation.presets",
    "recipes.translation.settings",
    "recipes.translation.command_settings",
    "recipes.translation.config",
    "recipes.translation.cluster",
    "recipes.translation.replicas",
    "recipes.translation.corpus",
    "recipes.translation.splits",
    "recipes.translation.shards",
    "recipes.translation.shortlists",
    "recipes.translation.batches",
    "recipes.translation.text_translator",
    "recipes.translation.pipeline",
    "recipes.translation.inputs",
    "recipes.translation.data",
    "recipes.translation.text_io",
    "recipes.translation.scores",
    "recipes.translation.trained_run",
    "recipes.translation.averaging",
    "recipes.translation.budget",
    "recipes.translation.steps",
    "recipes.translation.distillation",
    "recipes.translation.model",
    "recipes.translation.callbacks",
    "recipes.translation.training",
    "recipes.translation.hyperparameter_search",
    "recipes.translation.members",
    "recipes.translation.workers",
    "recipes.translation.commands",
    "recipes.translate",
    "recipes.gpu_check",
)
# The digits recipe's modules: its command line and the package below it.
DIGITS = (
    "recipes.digits",
    "recipes.digits.data",
    "recipes.digits.export",
    "recipes.spatial_transformer_digits",
)
# The function-level imports of one recipe module by another, and why each
# is not at module level (never to dodge a cycle: the graph counts them).
DEFERRED = {
    # Keras and TensorFlow only once the arguments are parsed: --help at once.
    ("recipes.translate", "recipes.translation.commands"),
    # A member's process imports members.py before it takes its share of
    # the CPU, and training.py starts TensorFlow.
    ("recipes.translation.members", "recipes.translation.training"),
    # The same for a worker of `train --workers` and workers.py.
    ("recipes.translation.workers", "recipes.translation.training"),
}


def tree_modules(*tops):
    """`{module: path}` of the folders `tops` of the repository; a folder
    without `__init__.py` (bench/) counts as a package all the same."""
    found = {}
    for top in tops:
        for folder, subfolders, files in os.walk(os.path.join(ROOT, top)):
            subfolders[:] = [s for s in subfolders if s != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    found[module_name(os.path.relpath(path, ROOT))] = path
    return found


INSTALLED = "keras_attention_recipes"  # recipes/ as pyproject.toml installs it


def repository_name(module):
    """keras_attention_recipes.translation.x -> recipes.translation.x: the
    installed name of a recipe module as its path in the repository."""
    if module == INSTALLED or module.startswith(INSTALLED + "."):
        return "recipes" + module[len(INSTALLED) :]
    return module


def from_base(node, package, known):
    """The module a `from ... import` (`node`) in `package` imports from:
    a relative import resolved, a recipe's installed name as its recipes/
    module, a bench/ script's bare sibling as `bench.<name>`."""
    base = repository_name(node.module or "")
    if node.level:
        parts = package.split(".")
        return ".".join(parts[: len(parts) - node.level + 1] + [base] * bool(base))
    if f"{package}.{base}" in known:  # bench/: a sibling script
        return f"{package}.{base}"
    return base


def tree_imports(known):
    """`(importer, imported, at module level)` for every import of a module
    of `known` by one of them (a recipe under its installed name,
    `keras_attention_recipes`, is its recipes/ module). A bench/ script's
    bare `import timing` is its sibling's (the scripts put their folder
    first on `sys.path`)."""
    for name, path in sorted(known.items()):
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        tree = ast.parse(open(path, encoding="utf-8").read())
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    for candidate in (f"{package}.{alias.name}", repository_name(alias.name)):
                        if candidate in known:
                            targets.append(candidate)
                            break
            elif isinstance(node, ast.ImportFrom):
                base = from_base(node, package, known)
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        targets.append(f"{base}.{alias.name}")
                    elif base in known:
                        targets.append(base)
            for target in targets:
                if target != name:
                    yield name, target, id(node) in top_level


def tree_graph(*tops):
    known = tree_modules(*tops)
    graph = {name: set() for name in known}
    for importer, target, _ in tree_imports(known):
        graph[importer].add(target)
    return graph


def test_the_recipes_graph_sees_every_kind_of_import():
    graph = tree_graph("recipes", "bench")
    assert "recipes.translation.trained_run" in graph["recipes.translation.distillation"]
    assert "recipes.translation.commands" in graph["recipes.translate"]  # in a function
    assert "recipes.runs" in graph["recipes.spatial_transformer_digits"]  # from . import runs
    assert "bench.timing" in graph["bench.decoding"]  # a sibling script
    assert "recipes.translation.trained_run" in graph["bench.serving"]
    assert set(PLUMBING + TRANSLATION) <= set(graph)


def test_no_import_cycle_in_the_recipes_and_benchmarks():
    """Function-level imports count: a cycle they hide is still a cycle."""
    assert cycles(tree_graph("recipes", "bench")) == []


def test_no_recipe_imports_another_recipes_modules():
    """The plumbing imports no recipe; a recipe (the translation recipe's
    modules, the digits recipe's, or any other module of recipes/: the
    bottleneck sweep, ...) imports the plumbing and its own modules only,
    and nothing of bench/; the translation recipe's modules import only
    those before them in `TRANSLATION` (no upward import)."""
    graph = tree_graph("recipes", "bench")

    def recipe(name):
        if name in TRANSLATION:
            return "translation"
        return "digits" if name in DIGITS else name

    for importer, targets in sorted(graph.items()):
        if importer.startswith("bench."):
            continue  # the benchmarks may import any recipe
        for target in sorted(targets):
            assert not target.startswith("bench."), f"{importer} imports {target}"
            if importer in PLUMBING:
                assert target in PLUMBING, f"the plumbing {importer} imports {target}"
            elif target not in PLUMBING:
                assert recipe(target) == recipe(importer), f"{importer} imports {target}"
            if importer in TRANSLATION and target in TRANSLATION:
                assert TRANSLATION.index(target) < TRANSLATION.index(importer), (
                    f"{importer} imports {target}, which is above it"
                )


def test_recipe_modules_import_each_other_at_module_level():
    """Only the imports in `DEFERRED` wait for a function, each for a heavy
    dependency: none hides a cycle, and none is there out of habit."""
    known = tree_modules("recipes")
    deferred = {(importer, target) for importer, target, top in tree_imports(known) if not top}
    assert deferred == DEFERRED


# -- Names where they are defined, private names kept private, sizes ---------

# Modules whose job is to keep an old import path working: they import
# names to offer them (keras_attention.deprecations lists each with the
# release that removes it).
SHIMS = {
    "keras_attention.compat",
    "keras_attention.serving.export",
    "keras_attention.serving.text",
    "keras_attention.serving.numbers",
    "keras_attention.serving.distribute",
}
# The one module allowed past `MAX_LINES`: ConvS2S's layers read as one
# paper (GLU convolutions, multi-step attention, the encoder and decoder).
LONG_MODULES = {"keras_attention.convs2s"}
MAX_LINES = 600
MAX_FLOORS = 11  # recipes/translation's longest chain of imports, itself included


def project_modules():
    """`{module: path}` of keras_attention/, recipes/ (by its repository
    name) and bench/."""
    return tree_modules("keras_attention", "recipes", "bench")


def defined_names(path):
    """The names a module defines at its top level (functions, classes,
    assignments, also under `if`/`try`), not those it imports."""
    names = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            names.add(leaf.id)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                for extra in ("orelse", "finalbody"):
                    visit(getattr(node, extra, []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(open(path, encoding="utf-8").read()).body)
    return names


def from_imports(known):
    """`(importer, module, name)` for every `from module import name` of a
    project module by another, relative or absolute, anywhere in the file."""
    for importer, path in sorted(known.items()):
        package = importer if path.endswith("__init__.py") else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = from_base(node, package, known)
            if base in known:
                for alias in node.names:
                    if f"{base}.{alias.name}" not in known:  # a name, not a submodule
                        yield importer, base, alias.name


# Names a module serves by its `__getattr__` for old code (0.2.0's
# `registry.ATTENTION`), which tests import on purpose.
SERVED_FOR_OLD_CODE = {("keras_attention.registry", "ATTENTION")}


def test_names_are_imported_from_the_module_that_defines_them():
    """No facade below a package's `__init__`: a name is imported, by the
    package, its recipes, bench/ or the tests, from the module that defines
    it, never from one that imported it in turn (which adds a floor and
    hides the dependency), except from the deprecation shims that keep old
    paths working."""
    known = project_modules()
    importers = {**known, **tree_modules("tests")}
    defined = {name: defined_names(path) for name, path in known.items()}
    packages = {name for name, path in known.items() if path.endswith("__init__.py")}
    through = sorted(
        f"{importer} takes {name} from {module}"
        for importer, module, name in from_imports(importers)
        if module in known
        and module not in packages | SHIMS
        and name not in defined[module]
        and (module, name) not in SERVED_FOR_OLD_CODE
    )
    assert through == []


def test_no_module_imports_another_modules_private_names():
    """A `_name` is its module's own: another module that needs it gets a
    public name."""
    known = project_modules()
    private = sorted(
        f"{importer} imports {module}.{name}"
        for importer, module, name in from_imports(known)
        if name.startswith("_") and not name.startswith("__") and importer != module
    )
    assert private == []


def test_every_module_is_at_most_600_lines():
    long = {
        name: sum(1 for _ in open(path, encoding="utf-8"))
        for name, path in project_modules().items()
        if name not in LONG_MODULES
    }
    assert {name: lines for name, lines in long.items() if lines > MAX_LINES} == {}


def floors(graph, within):
    """`{module: floor}` of the modules of `graph` named in `within`: 1
    for one that imports none of them, else one more than the highest it
    imports."""
    found = {}

    def floor(name):
        if name not in found:
            below = [target for target in graph[name] if target in within]
            found[name] = 1 + max((floor(target) for target in below), default=0)
        return found[name]

    return {name: floor(name) for name in within}


def test_floors_count_chains_of_imports():
    assert floors({"a": {"b"}, "b": {"c"}, "c": set()}, ("a", "b", "c")) == {"a": 3, "b": 2, "c": 1}


def test_the_translation_recipe_stands_at_most_11_floors_deep():
    """Each floor is a real dependency: `recipes/translation` (its modules
    and its command line) is at most `MAX_FLOORS` imports deep."""
    graph = tree_graph("recipes", "bench")
    levels = floors(graph, [name for name in TRANSLATION if name != "recipes.translation"])
    assert max(levels.values()) <= MAX_FLOORS, sorted(levels.items(), key=lambda item: item[1])


def test_tests_and_benchmarks_import_the_recipes_by_their_installed_name():
    """One copy of each recipe class: `keras_attention_recipes.x`, never
    `recipes.x` through the repository on `sys.path` (both at once made two
    `UsageError` classes, and an `except` of one missed the other)."""
    found = []
    for top in ("tests", "bench"):
        for name in sorted(os.listdir(os.path.join(ROOT, top))):
            if not name.endswith(".py"):
                continue
            for module, _ in imported(os.path.join(ROOT, top, name)):
                if module == "recipes" or module.startswith("recipes."):
                    found.append(f"{top}/{name}: {module}")
    assert found == []
