"""Note [Channels-last convolution programs]
PyTorch lays images out NCHW; XLA CPU's convolution kernels work in NHWC, so XLA
canonicalizes every convolution into an NHWC one between two transposes, and copies
each activation twice around every convolution: in the medium zoo ResNet's compiled SGD
step those copies took as long as the convolutions themselves. XLA does not cancel a
transpose against the next convolution's across the batch norms, ReLUs and residual
additions between them.

`channels_last` rewrites a compiled graph's JAX program so that the values between
convolutions are held channels-last. An interpreter binds the program's equations as
JAX's own `eval_jaxpr` does, and keeps each value together with the permutation it is
held in (`physical = transpose(logical, perm)`):

- a convolution reads its operands as they are held (its dimension numbers say where
  each role's dimension is) and writes its output in XLA's canonical order (batch,
  spatial dimensions, feature);
- elementwise operations whose operands share one permutation compute in it;
  broadcasts (a batch norm's per-channel statistics) and scalars follow their partner;
- reductions, windowed reductions (pooling and its gradient), pads, slices and
  concatenations map their dimension parameters through the permutation;
- a transpose changes only the permutation the value is held in;
- any other equation, and the program's outputs, read the logical value: the
  transpose back is made there, once.

So the program computes the same values, with the transposes only where a value leaves
the region between convolutions. Nested jitted functions (every lowering is one) and
custom derivative rules are interpreted inline, since the program is not differentiated
again. Graphs without convolutions are compiled as traced."""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import numpy as np
from jax import lax
from jax.extend import core as jex_core
from jax.extend import source_info_util
from jax.extend.core import Literal
from jax.extend.core import primitives as P

from ..platform.backend import CONVOLUTION_OPS
from ..platform.config import config

_ELEMENTWISE = frozenset(getattr(P, name) for name in (
    "abs_p", "acos_p", "acosh_p", "add_jaxvals_p", "add_p", "and_p", "asin_p", "asinh_p", "atan2_p", "atan_p",
    "atanh_p", "cbrt_p", "ceil_p", "clamp_p", "convert_element_type_p", "copy_p", "cos_p", "cosh_p", "div_p",
    "eq_p", "erf_inv_p", "erf_p", "erfc_p", "exp2_p", "exp_p", "expm1_p", "floor_p", "ge_p", "gt_p",
    "integer_pow_p", "is_finite_p", "le_p", "lgamma_p", "digamma_p", "log1p_p", "log_p", "logistic_p", "lt_p",
    "max_p", "min_p", "mul_p", "ne_p", "neg_p", "nextafter_p", "not_p", "or_p", "pow_p", "reduce_precision_p",
    "rem_p", "round_p", "rsqrt_p", "select_n_p", "sign_p", "sin_p", "sinh_p", "sqrt_p", "square_p", "sub_p",
    "tan_p", "tanh_p", "xor_p", "stop_gradient_p",
) if hasattr(P, name))
_REDUCTIONS = frozenset({P.reduce_sum_p, P.reduce_max_p, P.reduce_min_p, P.reduce_prod_p, P.reduce_and_p,
                         P.reduce_or_p, P.argmax_p, P.argmin_p})
_WINDOWED = frozenset({P.reduce_window_max_p, P.reduce_window_min_p, P.reduce_window_sum_p})
_INLINED = frozenset({P.jit_p, P.custom_jvp_call_p, P.custom_vjp_call_p, P.closed_call_p})


def for_graph(fn: Callable, op_names, static_argnums: tuple[int, ...] = ()) -> Callable:
    """`fn`, the function a graph with these ops compiles, rewritten by `channels_last`
    when the graph has convolutions and the setting is on."""
    if config.channels_last_convolutions and not CONVOLUTION_OPS.isdisjoint(op_names):
        return channels_last(fn, static_argnums)
    return fn


def channels_last(fn: Callable, static_argnums: tuple[int, ...] = ()) -> Callable:
    """`fn` (a function of arrays, traced by jax.jit) with Note [Channels-last convolution
    programs] applied."""

    @functools.wraps(fn)
    def rewritten(*args):
        closed, out_shape = jax.make_jaxpr(fn, static_argnums=static_argnums, return_shape=True)(*args)
        dynamic = [a for i, a in enumerate(args) if i not in static_argnums]
        held = _interpret(closed.jaxpr, [_Held(c) for c in closed.consts], [_Held(a) for a in jax.tree.leaves(dynamic)])
        return jax.tree.unflatten(jax.tree.structure(out_shape), [h.logical() for h in held])

    return rewritten


def _inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for j, d in enumerate(perm):
        inv[d] = j
    return tuple(inv)


class _Held:
    """A value held as `transpose(logical, perm)` (perm None: as it is)."""

    __slots__ = ("value", "perm")

    def __init__(self, value: Any, perm: tuple[int, ...] | None = None):
        self.value = value
        self.perm = perm

    def logical(self) -> Any:
        return self.value if self.perm is None else lax.transpose(self.value, _inverse(self.perm))

    def held_in(self, perm: tuple[int, ...]) -> Any:
        if self.perm == perm:
            return self.value
        if self.perm is None:
            return lax.transpose(self.value, perm)
        inv = _inverse(self.perm)
        return lax.transpose(self.value, tuple(inv[d] for d in perm))


class _Broadcast(_Held):
    """broadcast_in_dim(operand, shape, dims), made in whatever order its reader holds."""

    __slots__ = ("shape", "dims")

    def __init__(self, operand: Any, shape: tuple, dims: tuple):
        super().__init__(operand)
        self.shape, self.dims = shape, dims

    def logical(self) -> Any:
        return lax.broadcast_in_dim_p.bind(self.value, shape=self.shape, broadcast_dimensions=self.dims, sharding=None)

    def held_in(self, perm: tuple[int, ...]) -> Any:
        inv = _inverse(perm)
        target = [inv[d] for d in self.dims]
        order = sorted(range(len(target)), key=target.__getitem__)
        operand = self.value if order == sorted(order) else lax.transpose(self.value, tuple(order))
        return lax.broadcast_in_dim_p.bind(operand, shape=tuple(self.shape[d] for d in perm),
                                           broadcast_dimensions=tuple(sorted(target)), sharding=None)


def _interpret(jaxpr, consts: list[_Held], args: list[_Held]) -> list[_Held]:
    env: dict = {}

    def read(atom) -> _Held:
        return _Held(atom.val) if isinstance(atom, Literal) else env[atom]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    outer = source_info_util.current_name_stack()
    for eqn in jaxpr.eqns:
        # each equation keeps its name stack and source lines, as in eval_jaxpr (Note [Op
        # names in programs] in exec/eager.py)
        with source_info_util.user_context(eqn.source_info.traceback, name_stack=outer + eqn.source_info.name_stack):
            ins = [read(a) for a in eqn.invars]
            out = _rewrite(eqn, ins)
            if out is None:
                values = eqn.primitive.bind(*[h.logical() for h in ins], **eqn.primitive.get_bind_params(eqn.params))
                out = [_Held(v) for v in values] if eqn.primitive.multiple_results else [_Held(values)]
        env.update(zip(eqn.outvars, out))
    return [read(v) for v in jaxpr.outvars]


def _unconstrained(params: dict) -> bool:
    """Whether a nested jitted function leaves its operands' and results' shardings and
    layouts to its caller, so that inlining it loses nothing."""
    return all(type(s).__name__ == "UnspecifiedValue"
               for s in (*params.get("in_shardings", ()), *params.get("out_shardings", ()))) \
        and all(x is None for x in (*params.get("in_layouts", ()), *params.get("out_layouts", ())))


def _permuted(perm: list[int] | tuple[int, ...]) -> tuple[int, ...] | None:
    perm = tuple(perm)
    return None if perm == tuple(range(len(perm))) else perm


def _rewrite(eqn, ins: list[_Held]) -> list[_Held] | None:
    """`eqn`'s outputs computed on its operands as they are held, or None to bind it on
    their logical values."""
    prim, params = eqn.primitive, eqn.params
    if prim in _INLINED:
        closed = params.get("jaxpr") or params.get("call_jaxpr")
        if closed is None or not _unconstrained(params):
            return None
        if isinstance(closed, jex_core.ClosedJaxpr):
            inner, consts = closed.jaxpr, [_Held(c) for c in closed.consts]
        else:
            inner, consts = closed, []
        with source_info_util.extend_name_stack(params.get("name", prim.name)):
            return _interpret(inner, consts, ins[len(ins) - len(inner.invars):])
    if prim is P.conv_general_dilated_p:
        return [_convolution(ins, params)]
    if prim is P.broadcast_in_dim_p and not params.get("sharding") and ins[0].perm is None \
            and not isinstance(ins[0], _Broadcast) and len(ins) == 1:
        return [_Broadcast(ins[0].value, tuple(params["shape"]), tuple(params["broadcast_dimensions"]))]
    if prim is P.transpose_p and not isinstance(ins[0], _Broadcast):
        perm = ins[0].perm or tuple(range(len(params["permutation"])))
        inverse = _inverse(tuple(params["permutation"]))
        return [_Held(ins[0].value, _permuted([inverse[d] for d in perm]))]
    if any(h.perm is not None for h in ins):
        if prim in _ELEMENTWISE:
            return _elementwise(eqn, ins)
        if prim in _REDUCTIONS and len(ins) == 1:
            return _reduction(eqn, ins[0])
        if prim in _WINDOWED or prim in (P.select_and_scatter_add_p, P.select_and_gather_add_p, P.pad_p,
                                         P.slice_p, P.concatenate_p):
            return _by_dimension(eqn, ins)
    return None


def _elementwise(eqn, ins: list[_Held]) -> list[_Held] | None:
    shape = tuple(eqn.outvars[0].aval.shape)
    # broadcasts, scalars and operands with size-1 dimensions that lax broadcasts
    # against the others follow the operands of the output's shape
    follows = [isinstance(h, _Broadcast) or (h.perm is None and np.shape(h.value) != shape) for h in ins]
    perms = {h.perm for h, f in zip(ins, follows) if not f}
    if len(perms) != 1 or None in perms:
        return None  # operands in different orders: computed on the logical values
    (perm,) = perms
    values = [h.value if np.ndim(h.value) == 0 and not isinstance(h, _Broadcast) else h.held_in(perm) for h in ins]
    out = eqn.primitive.bind(*values, **eqn.primitive.get_bind_params(eqn.params))
    return [_Held(o, perm) for o in out] if eqn.primitive.multiple_results else [_Held(out, perm)]


def _reduction(eqn, held: _Held) -> list[_Held] | None:
    if isinstance(held, _Broadcast):
        return None
    perm, inv = held.perm, _inverse(held.perm)
    axes = tuple(sorted(inv[a] for a in eqn.params["axes"]))
    remaining = [perm[j] for j in range(len(perm)) if j not in axes]  # logical dims, in held order
    ranks = sorted(remaining)
    params = dict(eqn.params, axes=axes)
    out = eqn.primitive.bind(held.value, **eqn.primitive.get_bind_params(params))
    return [_Held(out, _permuted([ranks.index(d) for d in remaining]))]


_PER_DIMENSION = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation",
                  "padding_config", "start_indices", "limit_indices", "strides")


def _by_dimension(eqn, ins: list[_Held]) -> list[_Held] | None:
    prim = eqn.primitive
    rank = len(eqn.outvars[0].aval.shape)
    arrays = ins[:1] if prim is P.pad_p else ins
    perms = {h.perm for h in arrays if not isinstance(h, _Broadcast)}
    if len(perms) != 1 or None in perms:
        return None
    (perm,) = perms
    params = dict(eqn.params)
    for name in _PER_DIMENSION:
        if params.get(name) is not None and len(params[name]) == rank:
            params[name] = tuple(params[name][d] for d in perm)
    if prim is P.concatenate_p:
        params["dimension"] = _inverse(perm)[params["dimension"]]
    values = [h.held_in(perm) for h in arrays] + [h.logical() for h in ins[len(arrays):]]
    out = prim.bind(*values, **prim.get_bind_params(params))
    return [_Held(o, perm) for o in out] if prim.multiple_results else [_Held(out, perm)]


def _convolution(ins: list[_Held], params: dict) -> _Held:
    lhs, rhs = ins
    dn = params["dimension_numbers"]
    specs = []
    values = []
    for held, spec in ((lhs, dn.lhs_spec), (rhs, dn.rhs_spec)):
        if isinstance(held, _Broadcast):
            held = _Held(held.logical())
        inv = _inverse(held.perm) if held.perm is not None else tuple(range(len(spec)))
        specs.append(tuple(inv[d] for d in spec))
        values.append(held.value)
    out_spec = dn.out_spec
    rank = len(out_spec)
    # the output in XLA's canonical order: batch, the spatial dimensions, feature
    perm = (out_spec[0], *out_spec[2:], out_spec[1])
    held_spec = (0, rank - 1, *range(1, rank - 1))
    new = lax.ConvDimensionNumbers(specs[0], specs[1], held_spec)
    out = P.conv_general_dilated_p.bind(*values, **P.conv_general_dilated_p.get_bind_params(
        dict(params, dimension_numbers=new)))
    return _Held(out, _permuted(perm))
