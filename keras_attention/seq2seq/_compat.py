"""Constructor names of 0.1.0 that still work for one release."""

import warnings


def pop_renamed(kwargs, renames, owner, warn=True):
    """Remove the deprecated names of `renames` (old -> new) from `kwargs`
    and return `{new: value}`, warning unless loading a saved config."""
    found = {}
    for old, new in renames.items():
        if old in kwargs:
            found[new] = kwargs.pop(old)
            if warn:
                warnings.warn(
                    f"`{old}` of {owner} is deprecated; use `{new}` (the same meaning).",
                    DeprecationWarning,
                    stacklevel=3,
                )
    return found


def renamed_config(config, renames):
    """A saved config with 0.1.0's names replaced by the new ones."""
    config = dict(config)
    for old, new in renames.items():
        if old in config:
            config[new] = config.pop(old)
    return config
