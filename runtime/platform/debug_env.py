"""`XLA_NATIVE_FUNCTIONS_DEBUG`: the `config` debug settings from the environment, so
they work without editing code (as PyTorch/XLA's PT_XLA_DEBUG_LEVEL and torchax's
flags do). A comma-separated list, read once when the package is imported:

    print           config.debug_print_each_op = True: print each op with its inputs
    accuracy        config.debug_accuracy_for_each_op = True: run each eager op on
                    PyTorch CPU too and print the ops whose results differ
    atol=X, rtol=X  config.accuracy_atol / accuracy_rtol, the tolerances of `accuracy`
    dump=DIR        config.debug_dump_graphs = DIR: write the StableHLO of every
                    compiled graph (compile(), lazy mode, torch.compile) into DIR

    XLA_NATIVE_FUNCTIONS_DEBUG=print,accuracy,atol=1e-4 python train.py

docs/configuration.md lists them with the other settings.
"""

from __future__ import annotations

import os
from typing import Mapping

from .config import Config

ENV = "XLA_NATIVE_FUNCTIONS_DEBUG"
FLAGS = {"print": "debug_print_each_op", "accuracy": "debug_accuracy_for_each_op"}
VALUES = {"atol": "accuracy_atol", "rtol": "accuracy_rtol", "dump": "debug_dump_graphs"}


def apply_debug_env(config: Config, environ: Mapping[str, str] = os.environ) -> None:
    """Set `config`'s debug settings from XLA_NATIVE_FUNCTIONS_DEBUG; a setting it
    does not know raises ValueError naming the ones it does."""
    text = environ.get(ENV, "").strip()
    if not text:
        return
    known = ", ".join(list(FLAGS) + [f"{k}=..." for k in VALUES])
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, eq, value = item.partition("=")
        name = name.strip().lower()
        if name in FLAGS and not eq:
            setattr(config, FLAGS[name], True)
        elif name in VALUES and eq and value.strip():
            value = value.strip()
            if name == "dump":
                setattr(config, VALUES[name], os.path.abspath(os.path.expanduser(value)))
                continue
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"{ENV}: '{item}' needs a number, like {name}=1e-4") from None
            setattr(config, VALUES[name], number)
        else:
            raise ValueError(f"{ENV}={text!r}: unknown setting '{item}'; the settings are {known} (comma-separated)")
