"""Moving a module's parameters to and from our device keeps the parameter objects.

Note [Parameters keep their identity across devices]
`model.to("jax")` is `Module._apply(convert)`, which converts each parameter and then
decides how the module gets the result. Between the CPU and CUDA, both dense TensorImpls,
it sets `param.data = converted`: the Parameter object stays, so weights tied by sharing
one Parameter (a language model's embedding and output layer: GPT-2, T5, BERT's
masked-LM head) stay tied, an optimizer built before the move updates the moved values,
and RNNs' lists of their weights stay valid. Our tensor is a Python subclass, which
`param.data = ...` refuses, and not a traceable wrapper subclass, whose contents PyTorch
swaps into the old object (torch.utils.swap_tensors); left to itself, PyTorch would make
a new Parameter per module: a tied weight would become two that train apart, and an
optimizer made before the move would go on updating the CPU tensors, silently.

So Module._apply's question "swap this parameter with its converted self?" is answered
yes when the parameter crosses between our device and the CPU (where PyTorch keeps the
object for CUDA) and swap_tensors' conditions hold: no weak references, no owner of the
tensor but an AccumulateGrad node. Otherwise PyTorch's own answer stands and a new
Parameter is made, as it is for CUDA from the meta device (`to_empty`). A swap also
exchanges the objects' Python attributes; those a program set on a parameter (Mamba's
`_no_weight_decay`, read when optimizer groups are built) are put back after it, as
`param.data = ...` keeps them. `to_xla` and `to_torch` keep the objects by the same swap
(runtime/api.py). Dtype conversions on our device take PyTorch's path (`param.data =
converted`, which our tensor implements)."""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch
from torch.nn.modules import module as _module

from ..core.tensor import STORAGE_ATTRIBUTES, XlaTensor

_PLAIN = (torch.Tensor, torch.nn.Parameter)
# What a swap must exchange: the storage and the mark of a Parameter of our tensor class.
_OWN_ATTRIBUTES = STORAGE_ATTRIBUTES | {"_is_param"}
# Parameters swapped by the Module._apply running, with the attributes to put back.
_swapped: list[tuple[Any, dict]] = []


def program_attributes(t: Any) -> dict:
    """The Python attributes a program set on tensor `t`."""
    return {k: v for k, v in t.__dict__.items() if k not in _OWN_ATTRIBUTES}


def swap_keeping_attributes(old: Any, new: Any) -> None:
    """torch.utils.swap_tensors(old, new), `old` keeping the attributes a program set on it."""
    attributes = program_attributes(old)
    torch.utils.swap_tensors(old, new)
    old.__dict__.update(attributes)


def swappable(old: Any, new: Any) -> bool:
    """Whether parameter `old` can take the contents of `new`, its copy on or off our
    device, by torch.utils.swap_tensors."""
    if old.__class__ is XlaTensor:
        plain = new
    elif new.__class__ is XlaTensor:
        plain = old
    else:
        return False
    if plain.__class__ not in _PLAIN or plain.device.type != "cpu":
        return False
    if weakref.getweakrefs(old):
        return False
    count = old._use_count()
    return count == 1 or (count == 2 and old.is_leaf)


def _swaps_parameter(param_applied: Any) -> bool:
    """Module._apply's test, with `param` read from its frame (the only caller)."""
    if _traceable_wrapper_subclass(param_applied):
        return True
    param = sys._getframe(1).f_locals.get("param")
    if param is None or not swappable(param, param_applied):
        return False
    attributes = program_attributes(param)
    if attributes:
        _swapped.append((param, attributes))
    return True


def _apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> torch.nn.Module:
    """Module._apply, then the attributes of the parameters it swapped put back."""
    try:
        return _module_apply(self, fn, recurse)
    finally:
        while _swapped:
            param, attributes = _swapped.pop()
            param.__dict__.update(attributes)


_traceable_wrapper_subclass = _module.is_traceable_wrapper_subclass
_module_apply = torch.nn.Module._apply


def install() -> None:
    _module.is_traceable_wrapper_subclass = _swaps_parameter
    torch.nn.Module._apply = _apply
