"""Tensors made under torch.inference_mode().

Note [Inference mode]
PyTorch has two kinds of tensors: normal ones, whose dispatch key set holds the
Autograd and ADInplaceOrView keys and which carry a version counter, and inference
tensors, which hold neither (`is_inference()`). The TensorImpl constructor decides: a
tensor made from scratch is an inference tensor exactly when inference mode is on (the
thread-local `InferenceMode::is_enabled()`), while a view, made by the VIEW constructor
from its base's key set, is whatever its base is. Inference mode itself only excludes
the Autograd keys and stops including ADInplaceOrView in the thread-local dispatch key
sets, so that only tensors carrying ADInplaceOrView (normal ones) reach its kernels.
Hence, under inference mode: new results are inference tensors; a view of a normal
tensor (a parameter, an input moved before) is a normal tensor, which ADInplaceOrView's
`as_view` gives its base's version counter and the creation meta INFERENCE_MODE (so an
in-place write to it outside inference mode, when it requires grad, raises); an in-place
op on a normal tensor bumps its version. Outside inference mode, views of an inference
tensor are inference tensors (`as_view` leaves them alone), and PyTorch's own checks
refuse what is unsafe: `VariableVersion::bump` an in-place write to an inference tensor
(after its kernel wrote), SavedVariable an inference tensor saved for backward.

Our tensors follow all of this through PyTorch's own kernels, given three things:

- Views across modes. An XlaTensor is a `_make_wrapper_subclass` wrapper, made by the
  from-scratch constructor: it takes the mode of the moment, right for new results
  (`from_array`) and wrong for a view whose base is of the other kind. A view of a normal
  tensor made in inference mode came out an inference tensor, on which `as_view` then
  failed ("Cannot set version_counter for inference tensor"); a view of an inference
  tensor made outside came out normal. So a view is made under its base's kind
  (`made_like`, called by exec/mutation.py `alias` for every view op): when the two
  differ, which happens only across the edge of an inference_mode block, the wrapper is
  made under `torch._C._InferenceMode(kind)`, the guard behind torch.inference_mode,
  whose deletion restores the thread's state exactly. The same goes for tensors standing
  for an existing one: the replacement that an in-place view op (t_, squeeze_) or
  resize_ copies into `self` with `.data` (TensorImpl::shallow_copy_from copies the key
  set, and PyTorch refuses a different one on a device like ours: core/tensor.py's
  `data` setter), the views of arguments a compile() replay returns, and the new
  tensors we return for ops PyTorch makes views (a conjugate; view_as_complex of a
  tensor that is not a view of complex memory: exec/mutation.py `of_kind`).
- Decompositions. Inference mode skips the Autograd keys, where
  CompositeImplicitAutograd operators (reshape, flatten, linear, softmax) are decomposed
  otherwise, so they reach our backend (frontends/dispatch.py `missing_op`), where
  PyTorch's Python fallback has excluded ADInplaceOrView and every key above Python:
  their inner views would not be tracked. PyTorch CPU runs their C++ kernel at its
  backend key with ADInplaceOrView active, so `decompose` does too, unless the operator
  has an ADInplaceOrView kernel of its own (narrow, chunk), which excluded it.
- compile() (frontends/replay.py). A replay writes storages without running in-place
  ops: it advances the version counters of what it wrote by as much as the trace did, a
  plan replays only in the inference mode it was traced in (so a write to an inference
  tensor outside it is traced again, and refused by PyTorch), and an argument's kind is
  part of the call signature (an inference tensor saved for backward is refused in a
  trace).

Cost: a view op checks `base.is_inference() is not is_inference_mode_enabled()`, about
0.2 us against the 10 or more a view op takes; ops that make new results check nothing;
a replay checks the mode once and each tensor argument's kind once.

This module uses torch only, so that core/tensor.py can build on it.
"""

from __future__ import annotations

from typing import Any

import torch

inference_mode_enabled = torch.is_inference_mode_enabled
_InferenceMode = torch._C._InferenceMode


def made_in_mode(inference: bool, make: Any, *args: Any) -> Any:
    """`make(*args)` run with inference mode set to `inference`: the tensors it makes
    are inference tensors exactly when `inference` is true. `make` must only make
    tensors, not run ops: the guard also changes which dispatch keys are excluded."""
    guard = _InferenceMode(inference)
    try:
        return make(*args)
    finally:
        del guard


def made_like(base: torch.Tensor, make: Any, *args: Any) -> Any:
    """`make(*args)`, tensors of `base`'s kind: inference tensors exactly when `base` is
    one (Note [Inference mode]). `make` must only make tensors."""
    inference = base.is_inference()
    if inference is inference_mode_enabled():
        return make(*args)
    return made_in_mode(inference, make, *args)


_COMPOSITE_IMPLICIT = torch._C.DispatchKey.CompositeImplicitAutograd
_AD_INPLACE_OR_VIEW = torch._C.DispatchKey.ADInplaceOrView
_is_excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
_set_excluded = torch._C._dispatch_tls_set_dispatch_key_excluded
_has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
# per operator (by id): 0 no CompositeImplicitAutograd kernel; 1 one, and an
# ADInplaceOrView kernel too (narrow, chunk); 2 one, and no ADInplaceOrView kernel
_composite: dict[int, int] = {}


def composite_implicit(func: Any) -> int:
    """Whether `func` is an operator with a CompositeImplicitAutograd kernel (nonzero:
    see `_composite`). Under inference mode every such call (reshape, linear, softmax)
    reaches the backend, so the answer, about 10 us to look up, is kept per operator."""
    kind = _composite.get(id(func))
    if kind is None:
        kind = 0
        if isinstance(func, torch._ops.OpOverload) and _has_kernel(func.name(), "CompositeImplicitAutograd"):
            kind = 1 if _has_kernel(func.name(), "ADInplaceOrView") else 2
        _composite[id(func)] = kind
    return kind


def decompose(func: Any, args: tuple, kwargs: dict) -> Any:
    """PyTorch's C++ CompositeImplicitAutograd kernel of `func` run on our tensors, the
    one PyTorch runs eagerly (not a Python decomposition registered for tracing, which
    may differ: dropout's clones its input where the kernel returns it, interpolate's
    indexes with _unsafe_index). Outside inference mode such a call comes from below
    autograd (inside another kernel) and runs as it is. Under inference mode it comes
    from the program, and runs with ADInplaceOrView active, as on PyTorch CPU, unless the
    operator has an ADInplaceOrView kernel of its own (Note [Inference mode])."""
    if composite_implicit(func) != 2 or not inference_mode_enabled() or not _is_excluded(_AD_INPLACE_OR_VIEW):
        return func._op_dk(_COMPOSITE_IMPLICIT, *args, **kwargs)
    _set_excluded(_AD_INPLACE_OR_VIEW, False)
    try:
        return func._op_dk(_COMPOSITE_IMPLICIT, *args, **kwargs)
    finally:
        _set_excluded(_AD_INPLACE_OR_VIEW, True)
