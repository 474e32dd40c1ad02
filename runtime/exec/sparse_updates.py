"""Note [Sparse updates]
The gradient of an embedding table (embedding_dense_backward, _embedding_bag_backward,
the backward of indexing) is a scatter-add of a few rows into a table of zeros, and an
SGD step then adds it, scaled by -lr, to the parameter: `p + c * scatter(0, I, U)`. XLA
folds `p + scatter(0, I, U)` into one scatter onto a copy of `p`, but not through the
multiplication, so it writes the zero table, scatters into it, and reads both tables
again for the update: three passes over the table where one does, and none where the
graph updates a donated table in place (Note [Donated graph inputs] in
runtime/exec/graph.py). `fold_sparse_updates` rewrites a compiled graph's JAX program so that

    p + c * scatter(0, I, U)  becomes  scatter(p, I, c * U)
    p - c * scatter(0, I, U)  becomes  scatter(p, I, -(c * U))

(with any negations of the scatter on the way, as SGD's `maximize` adds)
for a scalar `c`, followed by a select: for a non-finite `c` the result plus `0 * c`
(NaN), as the dense form adds `0 * c` where no row lands. Where rows land the values
agree up to rounding: several updates of one row are scaled before they are summed, and
XLA may fuse the dense form's multiply and add into one rounding. Two differences
remain: with an infinite `c` the rows updates land on are NaN, where the dense form
gives +-inf (or NaN), the same entries being non-finite either way; and an entry of
-0.0 where no row lands may stay -0.0 where the dense form gives +0.0.

The rewrite works on the program's jaxpr: an interpreter binds every equation as JAX's
own `eval_jaxpr` does, and remembers which values are scatter-adds into zeros (and
their scalings) until an add or subtract consumes them. Values it does not rewrite are
bound unchanged, and XLA drops the dense forms no one reads any more. Only the
program's top level is rewritten; a jaxpr without a scatter-add into zeros is
interpreted as it stands. Interpreting costs a second pass over the program's
equations (0.3 s of the 2.5 s first call of an EfficientNet-sized training step with a
warm compilation cache), so graphs with none of the ops whose gradients scatter into
zeros (`SCATTERING_OPS`) are compiled as traced."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import jax
import numpy as np
from jax import lax
from jax.extend import source_info_util
from jax.extend.core import Literal

from ..platform.metrics import metrics


@dataclass(frozen=True)
class _ZeroScatter:
    """scale * scatter_add(zeros, indices, updates); scale None means 1."""

    indices: Any
    updates: Any
    params: dict
    scale: Any = None


# The ops whose lowerings scatter-add rows into a table of zeros: the gradients of
# embeddings and of indexing, and the scatters autograd builds them from.
SCATTERING_OPS = frozenset({
    "embedding_dense_backward", "_embedding_bag_backward", "_embedding_bag_dense_backward",
    "_embedding_bag_per_sample_weights_backward", "index_put", "index_put_values",
    "_unsafe_masked_index_put_accumulate", "index_add", "scatter_add",
})


def may_fold(op_names: Iterable[str]) -> bool:
    """Whether a graph with these ops can hold a sparse update to fold."""
    return not SCATTERING_OPS.isdisjoint(op_names)


def fold_sparse_updates(fn: Callable) -> Callable:
    """`fn` (a function of arrays, traced by jax.jit) with Note [Sparse updates] applied."""

    @functools.wraps(fn)
    def folded(*args):
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        outs = _interpret(closed.jaxpr, closed.consts, jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(out_shape), outs)

    return folded


def _is_zero_literal(atom) -> bool:
    return isinstance(atom, Literal) and np.ndim(atom.val) == 0 and atom.val == 0


def _interpret(jaxpr, consts, args) -> list:
    env: dict = {}
    zeros: set = set()  # variables holding a broadcast zero
    scatters: dict = {}  # variable -> _ZeroScatter giving its value

    def read(atom):
        return atom.val if isinstance(atom, Literal) else env[atom]

    for var, val in zip(jaxpr.constvars, consts):
        env[var] = val
    for var, val in zip(jaxpr.invars, args):
        env[var] = val
    outer = source_info_util.current_name_stack()
    for eqn in jaxpr.eqns:
        # each equation keeps its name stack and source lines, as in eval_jaxpr (Note [Op
        # names in programs] in exec/eager.py)
        with source_info_util.user_context(eqn.source_info.traceback, name_stack=outer + eqn.source_info.name_stack):
            out = _rewrite(eqn, read, zeros, scatters)
            if out is None:
                out = eqn.primitive.bind(*map(read, eqn.invars), **eqn.primitive.get_bind_params(eqn.params))
        if eqn.primitive.multiple_results:
            env.update(zip(eqn.outvars, out))
        else:
            env[eqn.outvars[0]] = out
    return [read(v) for v in jaxpr.outvars]


def _rewrite(eqn, read, zeros: set, scatters: dict):
    """The rewritten value of `eqn`'s output, or None to bind it unchanged; records
    which outputs are zero tables and scatters into them."""
    prim, ins = eqn.primitive, eqn.invars
    if prim is lax.broadcast_in_dim_p and _is_zero_literal(ins[0]):
        zeros.add(eqn.outvars[0])
    elif prim is lax.scatter_add_p and not isinstance(ins[0], Literal) and ins[0] in zeros:
        scatters[eqn.outvars[0]] = _ZeroScatter(read(ins[1]), read(ins[2]), eqn.params)
    elif prim is lax.neg_p and (found := _scatter_operand(ins[0], scatters)) is not None:
        scatters[eqn.outvars[0]] = _ZeroScatter(found.indices, -found.updates, found.params, found.scale)
    elif prim is lax.mul_p:
        for s, c in (ins, ins[::-1]):
            found = _scatter_operand(s, scatters)
            if found is not None and c.aval.shape == () and c.aval.dtype == eqn.outvars[0].aval.dtype:
                scale = read(c) if found.scale is None else read(c) * found.scale
                scatters[eqn.outvars[0]] = _ZeroScatter(found.indices, found.updates, found.params, scale)
                break
    elif prim is lax.add_p or prim is lax.sub_p:
        orders = (ins, ins[::-1]) if prim is lax.add_p else (ins,)
        for dense, s in orders:
            found = _scatter_operand(s, scatters)
            if found is not None and dense.aval.shape == s.aval.shape and dense.aval.dtype == s.aval.dtype:
                metrics.sparse_updates_folded += 1
                return _apply(read(dense), found, negate=prim is lax.sub_p)
    return None


def _scatter_operand(atom, scatters: dict) -> _ZeroScatter | None:
    return None if isinstance(atom, Literal) else scatters.get(atom)


def _apply(dense, s: _ZeroScatter, negate: bool):
    updates = s.updates if s.scale is None else s.updates * s.scale
    params = lax.scatter_add_p.get_bind_params(s.params)
    out = lax.scatter_add_p.bind(dense, s.indices, -updates if negate else updates, **params)
    if s.scale is None:
        return out
    # Where no row lands the dense form adds 0 * c: NaN for a non-finite c, else a zero.
    # The pass over the table that adds it comes after the scatter: before it, the pass
    # would keep XLA from updating a donated table in place (Note [Donated graph inputs]
    # in runtime/exec/graph.py).
    zero = np.zeros((), dense.dtype) * s.scale
    return lax.select(lax.is_finite(s.scale), out, out - zero if negate else out + zero)
