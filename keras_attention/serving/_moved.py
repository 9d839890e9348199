"""The old paths of the modules that left `serving/`: each keeps working,
every name taken from it a `DeprecationWarning` that says where it lives
now (`serving/text.py`, `serving/numbers.py`, `serving/distribute.py`)."""

import importlib
import warnings


def moved_module(old, new, homes):
    """`(__getattr__, __dir__)` for the module `old`, whose names now live
    in the modules `homes` (searched in order): a name is looked up there,
    with a `DeprecationWarning` naming `new`, the path to import it from."""

    def __getattr__(name):
        if not name.startswith("__"):
            for home in homes:
                module = importlib.import_module(home)
                if hasattr(module, name):
                    public = hasattr(importlib.import_module(new), name)
                    warnings.warn(
                        f"{old} is deprecated: {name} moved to {home}; import it from "
                        f"{new if public else home} instead.",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    def __dir__():
        return sorted(
            {
                name
                for home in homes
                for name, value in vars(importlib.import_module(home)).items()
                if not name.startswith("__") and not isinstance(value, type(importlib))
            }
        )

    return __getattr__, __dir__
