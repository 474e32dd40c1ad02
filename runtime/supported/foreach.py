"""Foreach ops (torch._foreach_add_(params, grads, alpha=-lr) and the like): a
pointwise op over lists of tensors, which is how torch.optim updates parameters.

Note [Foreach ops]
torch.optim runs its multi-tensor ("foreach") implementation only for tensors whose
exact type it lists (torch.Tensor, nn.Parameter) on devices with foreach kernels; an
XlaTensor would take the single-tensor path, one op per parameter and update (AdamW:
about ten per parameter, each a separate executable). `enable_foreach_optimizers`
lists XlaTensor, so optimizers and clip_grad_norm_ take the foreach path.

The ops listed in the manifest run one executable per 8 elements of the lists: each
element goes through the element op's own lowering and shape function
(`_foreach_add.List` is add.Tensor per element), inside one jax.jit. Why 8: each
element is one kernel, and XLA CPU hands the independent kernels of a program of more
than 8 to its thread pool (unless every buffer is tiny), whose hand-offs cost more than
a small tensor's update. In the small zoo ResNet (20 parameters), the SGD step's
`_foreach_add_` took 619-753 us as one executable and 464-588 us as three; AdamW's
foreach ops 3.0-3.8 ms against 2.7-3.3 ms; one executable per element was slower than
either (0.64 and 3.9 ms). While tracing
they record one node per element, as the element op would. Every other foreach op
(unlisted ones: _foreach_erf, _foreach_frac, ...) runs PyTorch's per-tensor loop, whose
per-element ops come back here (`per_tensor_loop` in runtime/exec/mutation.py): correct, one
op per element. So does an in-place foreach op whose lists alias (`lists_alias`).
An in-place foreach op otherwise runs its functional form with the tensors it writes in
`context.foreach_into`, and the executable writes each result into its tensor, donating
the buffer when nothing else holds it (Note [Donated in-place updates] in
runtime/exec/mutation.py): an optimizer step updates its large parameters in place. A whole
tensor whose buffer is not donated takes its result directly too, without a result
tensor to unwrap (about 10 us less per parameter and op: the small zoo MLP's AdamW
step, six parameters, took 3.6-3.9 ms instead of 4.2-6.9).
"""

from __future__ import annotations

from typing import Any


from ..core.context import context
from ..core.convert import X64
from ..core.ir import ATTR_LIST, OPT_TENSOR, SCALAR, STATIC_KINDS, TENSOR
from ..core.tensor import XlaTensor, from_array
from ..exec.eager import attr_list, lower_checked, operand, operand_opt, run_node, scalar_operand
from ..exec.first_call import answerable, check_new_signature, foreach_call
from ..exec.mutation import donatable, take_buffer, update_in_place, write_inplace
from ..exec.registry import node
from ..platform.config import config
from ..platform.executable_cache import eager_jit

ELEMENTS_PER_EXECUTABLE = 8  # Note [Foreach ops]: XLA CPU runs up to 8 kernels in order
_UNWRAP = {TENSOR: operand, OPT_TENSOR: operand_opt, SCALAR: scalar_operand}


def enable_foreach_optimizers() -> None:
    """Let torch.optim and clip_grad_norm_ take their foreach path for XlaTensors."""
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for types in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if XlaTensor not in types:
            types.append(XlaTensor)


# ---------------------------------------------------------------- one executable per call


_EXECUTABLES: dict[tuple[str, bool], Any] = {}


def _executable(cls: Any, in_place: bool) -> Any:
    """jit(run)(donated, dynamic, static): per element, its dynamic arguments, and its
    static ones with whether its `self` is among the donated arrays. In place, each
    result is checked and cast as a write into `self` (trace time, before any
    donation)."""
    exe = _EXECUTABLES.get((cls.name, in_place))
    if exe is None:
        kinds = cls.arg_kinds

        tiered = answerable(cls)

        def run(donated, dynamic, static):
            if tiered:  # Note [First calls on PyTorch CPU]
                check_new_signature()
            donated = iter(donated)
            outs = []
            for dyn, (stat, donates) in zip(dynamic, static):
                dyn, stat = iter(dyn), iter(stat)
                args = [next(stat) if k in STATIC_KINDS else next(donated) if i == 0 and donates else next(dyn)
                        for i, k in enumerate(kinds)]
                outs.append(lower_checked(cls, args, in_place))
            return outs

        run.__name__ = f"foreach_{cls.name}"
        exe = eager_jit(run, static_argnums=2, donate_argnums=0 if in_place else ())
        _EXECUTABLES[(cls.name, in_place)] = exe
    return exe


_LAYOUTS: dict[str, tuple] = {}


def _layout(cls: Any) -> tuple:
    """(positions of the dynamic arguments with their unwrapping, positions of the
    static ones with whether each is an attribute list) of an element op."""
    layout = _LAYOUTS.get(cls.name)
    if layout is None:
        kinds = cls.arg_kinds
        dynamic = tuple((i, _UNWRAP[k]) for i, k in enumerate(kinds) if k not in STATIC_KINDS)
        static = tuple((i, k == ATTR_LIST) for i, k in enumerate(kinds) if k in STATIC_KINDS)
        layout = _LAYOUTS[cls.name] = (dynamic, static)
    return layout


def each(name: str, per_element: list[tuple]) -> list[Any]:
    """The element op `name` (its unambiguous name) on each argument tuple: one executable per 8 elements
    eagerly, one node per element while tracing. Inside an in-place foreach op on these
    tensors (context.foreach_into), the results are written into each element's `self`
    here, its buffer donated where nothing else holds it, and `self` itself is returned."""
    cls = node(name)
    if context.trace is not None:
        return [run_node(cls, args) for args in per_element]
    into = context.foreach_into
    in_place = into is not None and len(into) == len(per_element) and all(
        t is args[0] for t, args in zip(into, per_element))
    dynamic_at, static_at = _layout(cls)
    min_bytes = config.donate_min_bytes
    donated, dynamic, static = [], [], []
    taken = []  # (storage, its array) of each buffer taken out to be donated
    for args in per_element:
        self = args[0]
        # donatable() rules out most elements by size; asking it only for large ones
        # keeps this loop short (it runs for every parameter in every optimizer op).
        donates = in_place and self.__class__ is XlaTensor and self.nbytes >= min_bytes and donatable(self, args[1:])
        dynamic.append([unwrap(args[i]) for i, unwrap in dynamic_at if i or not donates])
        static.append((tuple(attr_list(args[i]) if is_list else args[i] for i, is_list in static_at), donates))
        if donates:
            array, given = take_buffer(self._store)
            taken.append((self._store, array))
            donated.append(given)
    exe = _executable(cls, in_place)
    outs, used = [], 0
    try:
        with X64:
            for start in range(0, len(per_element), ELEMENTS_PER_EXECUTABLE):
                part = static[start:start + ELEMENTS_PER_EXECUTABLE]
                donors = sum(donates for _, donates in part)
                outs += foreach_call(exe, cls, in_place, donated[used:used + donors],
                                     dynamic[start:start + ELEMENTS_PER_EXECUTABLE], tuple(part))
                used += donors
    except BaseException:
        # raised while tracing a part, before its buffers were donated: an element of a
        # part that ran takes its result, as its buffer is gone; the others get theirs back
        taken.reverse()
        for i, (_, donates) in enumerate(static):
            if donates:
                store, array = taken.pop()
                store.array = outs[i] if i < len(outs) else array
        raise
    del taken, donated
    if not in_place:
        return [from_array(out) for out in outs]
    results = []
    for args, (_, donates), out in zip(per_element, static, outs):
        # In place, each result is already checked and cast as a write into its `self`:
        # a whole tensor takes it as it is, and only a view needs write_inplace's path.
        self = args[0]
        if donates or (self.__class__ is XlaTensor and self._whole):
            results.append(update_in_place(self, out))
        else:
            results.append(from_array(out))
    return results


def _check_lists(*lists: Any) -> None:
    """PyTorch's checks on foreach arguments (check_foreach_api_restrictions)."""
    if not lists[0]:
        raise RuntimeError("Tensor list must have at least one tensor.")
    for other in lists[1:]:
        if len(other) != len(lists[0]):
            raise RuntimeError(
                f"Tensor lists must have the same number of tensors, got {len(lists[0])} and {len(other)}"
            )


def _check_scalars(tensors: Any, scalars: Any) -> None:
    _check_lists(tensors)
    if len(scalars) != len(tensors):
        raise RuntimeError("Tensor list must have same number of elements as scalar list.")


def _binary(list_op: str, scalar_op: str):
    """The List, Scalar, ScalarList and Tensor forms of a binary op."""

    def on_list(self, other, alpha=None):
        _check_lists(self, other)
        extra = () if alpha is None else (alpha,)
        return each(list_op, [(a, b, *extra) for a, b in zip(self, other)])

    def on_scalar(self, scalar, alpha=None):
        _check_lists(self)
        extra = () if alpha is None else (alpha,)
        return each(scalar_op, [(a, scalar, *extra) for a in self])

    def on_scalars(self, scalars, alpha=None):
        _check_scalars(self, scalars)
        extra = () if alpha is None else (alpha,)
        return each(scalar_op, [(a, s, *extra) for a, s in zip(self, scalars)])

    def on_tensor(self, other, alpha=None):
        _check_lists(self)
        extra = () if alpha is None else (alpha,)
        return each(list_op, [(a, other, *extra) for a in self])

    return on_list, on_scalar, on_scalars, on_tensor


_add = _binary("add_Tensor", "add_Scalar")
_sub = _binary("sub_Tensor", "sub_Scalar")
_mul = _binary("mul_Tensor", "mul_Scalar")
_div = _binary("div_Tensor", "div_Scalar")


def impl__foreach_add_List(self, other, *, alpha=1):
    return _add[0](self, other, alpha)


def impl__foreach_add_Scalar(self, scalar):
    return _add[1](self, scalar, 1)


def impl__foreach_add_ScalarList(self, scalars):
    return _add[2](self, scalars, 1)


def impl__foreach_add_Tensor(self, other, *, alpha=1):
    return _add[3](self, other, alpha)


def impl__foreach_sub_List(self, other, *, alpha=1):
    return _sub[0](self, other, alpha)


def impl__foreach_sub_Scalar(self, scalar):
    return _sub[1](self, scalar, 1)


def impl__foreach_sub_ScalarList(self, scalars):
    return _sub[2](self, scalars, 1)


def impl__foreach_mul_List(self, other):
    return _mul[0](self, other)


def impl__foreach_mul_Scalar(self, scalar):
    return _mul[1](self, scalar)


def impl__foreach_mul_ScalarList(self, scalars):
    return _mul[2](self, scalars)


def impl__foreach_mul_Tensor(self, other):
    return _mul[3](self, other)


def impl__foreach_div_List(self, other):
    return _div[0](self, other)


def impl__foreach_div_Scalar(self, scalar):
    return _div[1](self, scalar)


def impl__foreach_div_ScalarList(self, scalars):
    return _div[2](self, scalars)


def impl__foreach_div_Tensor(self, other):
    return _div[3](self, other)


def impl__foreach_maximum_List(self, other):
    _check_lists(self, other)
    return each("maximum", list(zip(self, other)))


def impl__foreach_minimum_List(self, other):
    _check_lists(self, other)
    return each("minimum", list(zip(self, other)))


def impl__foreach_addcmul_Scalar(self, tensor1, tensor2, value=1):
    _check_lists(self, tensor1, tensor2)
    return each("addcmul", [(a, b, c, value) for a, b, c in zip(self, tensor1, tensor2)])


def impl__foreach_addcmul_ScalarList(self, tensor1, tensor2, scalars):
    _check_lists(self, tensor1, tensor2)
    _check_scalars(self, scalars)
    return each("addcmul", [(a, b, c, s) for a, b, c, s in zip(self, tensor1, tensor2, scalars)])


def impl__foreach_addcdiv_Scalar(self, tensor1, tensor2, value=1):
    _check_lists(self, tensor1, tensor2)
    return each("addcdiv", [(a, b, c, value) for a, b, c in zip(self, tensor1, tensor2)])


def impl__foreach_addcdiv_ScalarList(self, tensor1, tensor2, scalars):
    _check_lists(self, tensor1, tensor2)
    _check_scalars(self, scalars)
    return each("addcdiv", [(a, b, c, s) for a, b, c, s in zip(self, tensor1, tensor2, scalars)])


def impl__foreach_lerp_Scalar(self, tensors1, weight):
    _check_lists(self, tensors1)
    return each("lerp_Scalar", [(a, b, weight) for a, b in zip(self, tensors1)])


def impl__foreach_lerp_ScalarList(self, tensors1, weight):
    _check_lists(self, tensors1)
    _check_scalars(self, weight)
    return each("lerp_Scalar", [(a, b, w) for a, b, w in zip(self, tensors1, weight)])


def impl__foreach_lerp_List(self, tensors1, weights):
    _check_lists(self, tensors1, weights)
    return each("lerp_Tensor", list(zip(self, tensors1, weights)))


def impl__foreach_pow_List(self, exponent):
    _check_lists(self, exponent)
    return each("pow_Tensor_Tensor", list(zip(self, exponent)))


def impl__foreach_pow_Scalar(self, exponent):
    _check_lists(self)
    return each("pow_Tensor_Scalar", [(a, exponent) for a in self])


def impl__foreach_pow_ScalarAndTensor(self, exponent):
    _check_lists(exponent)
    return each("pow_Scalar", [(self, e) for e in exponent])


def impl__foreach_norm_Scalar(self, ord=2, dtype=None):
    _check_lists(self)
    return each("linalg_vector_norm", [(a, ord, None, False, dtype) for a in self])


def _unary(name: str, self: Any) -> list[Any]:
    _check_lists(self)
    return each(name, [(a,) for a in self])


def impl__foreach_abs(self):
    return _unary("abs", self)


def impl__foreach_neg(self):
    return _unary("neg", self)


def impl__foreach_reciprocal(self):
    return _unary("reciprocal", self)


def impl__foreach_sign(self):
    return _unary("sign", self)


def impl__foreach_sqrt(self):
    return _unary("sqrt", self)


def impl__foreach_zero_(self):
    write_inplace(self, _unary("zero", self))
