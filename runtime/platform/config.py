"""User settings: `xla_native_functions.config.<name> = value`. A misspelt name raises
AttributeError with the closest setting, a value of the wrong type TypeError naming the
type the setting takes: a setting that silently does nothing is worse than an error."""

from __future__ import annotations

import difflib
import os
import typing
from dataclasses import dataclass, fields
from typing import Any


@dataclass
class Config:
    # Print each op with its input shapes as it runs.
    debug_print_each_op: bool = False
    # Re-run each eager op on PyTorch CPU and report results beyond the tolerances below.
    debug_accuracy_for_each_op: bool = False
    accuracy_atol: float = 1e-5
    accuracy_rtol: float = 1.3e-6
    # A directory to write the StableHLO of every program compiled for compile(), lazy
    # mode and torch.compile into (op names in its locations), or None.
    debug_dump_graphs: str | None = None
    # Run ops listed in no manifest section through PyTorch CPU (counted and warned once
    # per op) instead of raising OperatorNotFound.
    allow_cpu_fallback: bool = False
    # Eager mode checks index values (gather, scatter, index_*, take, embedding,
    # nll_loss) and raises as PyTorch does, at one read to the host per such op
    # (the manifest's policy `eager_value_checks`). Compiled programs cannot raise.
    check_index_values: bool = True
    # Eager in-place ops on a tensor of at least this many bytes write into its own
    # buffer when nothing else can see the old value (Note [Donated in-place updates]
    # in runtime/exec/mutation.py); below it a fresh buffer costs no more.
    donate_min_bytes: int = 1 << 20
    # Memory that eager mode's compiled executables may hold, in bytes (None: unbounded).
    # Past it, the ops compiled least recently drop their executables and compile again
    # when next used (Note [Memory of eager executables] in
    # runtime/platform/executable_cache.py). The default, 1 GiB, is about 850 executables.
    eager_cache_bytes: int | None = 1 << 30
    # Compiled graphs take a weight that they multiply only transposed, by a few rows, as
    # a transposed copy kept per weight (Note [Transposed weights] in runtime/exec/graph.py):
    # faster products in small-batch inference, at the cost of those weights' memory.
    transposed_weight_copies: bool = True
    # Compiled graphs with convolutions hold the values between convolutions
    # channels-last, as XLA CPU's convolution kernels read them, so that XLA does not
    # transpose each activation around every convolution (Note [Channels-last
    # convolution programs] in runtime/exec/channels_last.py).
    channels_last_convolutions: bool = True
    # The first calls of a new eager op signature run on PyTorch's CPU kernel while the
    # op's executable compiles in a background thread (Note [First calls on PyTorch CPU]
    # in runtime/exec/first_call.py), and a compile() graph new in the process is
    # interpreted node by node that way while it compiles in the background (Note [First
    # calls of compiled graphs] in runtime/exec/graph_first_call.py). False: every new
    # signature and graph compiles before its first call returns.
    # XLA_NATIVE_FUNCTIONS_FIRST_CALLS_ON_CPU=0 in the environment sets the default to
    # False (the test suite does, to test the lowerings themselves).
    first_calls_on_cpu: bool = os.environ.get("XLA_NATIVE_FUNCTIONS_FIRST_CALLS_ON_CPU", "1").strip() != "0"

    def __setattr__(self, name: str, value: Any) -> None:
        accepted = _SETTING_TYPES.get(name)
        if accepted is None:
            raise AttributeError(_unknown_setting(name))
        kind = type(value)
        if kind not in accepted:
            if float in accepted and kind is int:
                value = float(value)  # an int is a fine float
            elif str in accepted and isinstance(value, os.PathLike):
                value = os.fspath(value)  # a directory given as a Path
            else:
                names = " or ".join("None" if t is type(None) else t.__name__ for t in accepted)
                article = "an" if names[0] in "aeiou" else "a"
                raise TypeError(f"xla_native_functions.config.{name} takes {article} {names}, "
                                f"not {kind.__name__} ({value!r})")
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not settings
        raise AttributeError(_unknown_setting(name))


# setting -> the types it takes (`str | None`: both)
_SETTING_TYPES: dict[str, tuple[type, ...]] = {
    f.name: typing.get_args(hint) or (hint,)
    for f in fields(Config) for hint in [typing.get_type_hints(Config)[f.name]]
}


def _unknown_setting(name: str) -> str:
    close = difflib.get_close_matches(name, _SETTING_TYPES, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"xla_native_functions.config has no setting {name!r}; {hint}(settings: {', '.join(_SETTING_TYPES)})"


config = Config()
