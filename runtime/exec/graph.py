"""A recorded graph as one XLA program: its nodes in order, its inputs, a key by its
structure (the cache of compiled graphs), and the jitted function that runs it."""

from __future__ import annotations

import os
import sys
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..core.convert import X64
from ..core.ir import ATTR, ATTR_LIST, Node, ScalarInput, SpecialScalar, Value
from ..platform.backend import graph_compiler_options
from ..platform.config import config
from ..platform.executable_cache import eager_jit
from ..platform.metrics import metrics
from .eager import scalar_operand, scope_name, scoped_lowering
from .graph_first_call import FirstCalls, interpretable
from .graph_program import run_program
from . import channels_last
from .sparse_updates import fold_sparse_updates, may_fold
from .registry import node, policy

_GRAPH_CACHE: dict[Any, Callable] = {}
# The key of the graph last run at each position within a trace: a trace cut by host
# reads (.item()) runs several graphs per step, each compared with its own predecessor.
_LAST_KEYS: dict[int, Any] = {}


def _collect(roots: list[Value]) -> tuple[list[Node], list[Value], list[ScalarInput]]:
    """Nodes in topological order, and the graph's array and scalar inputs."""
    order: list[Node] = []
    seen: set[int] = set()
    inputs: list[Value] = []
    scalars: list[ScalarInput] = []
    seen_inputs: set[int] = set()

    # No closure here calls itself or another: such a reference cycle would hold the
    # inputs' arrays until the garbage collector ran.
    def note(a: Any) -> None:
        """A graph input or scalar, the first time it is met."""
        if a.__class__ is Value:
            if a.node is None and id(a) not in seen_inputs:
                seen_inputs.add(id(a))
                inputs.append(a)
        elif a.__class__ is ScalarInput and id(a) not in seen_inputs:
            seen_inputs.add(id(a))
            scalars.append(a)

    for r in roots:
        if r.node is None:
            note(r)
            continue
        stack = [(r.node, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for a in reversed(node.args):
                if a.__class__ is list:
                    for x in a:
                        if x.__class__ is Value and x.node is not None:
                            if id(x.node) not in seen:
                                stack.append((x.node, False))
                        elif x is not None:
                            note(x)
                elif a.__class__ is Value and a.node is not None:
                    if id(a.node) not in seen:
                        stack.append((a.node, False))
                else:
                    note(a)
    return order, inputs, scalars


def _graph_key(order: list[Node], inputs: list[Value], scalars: list[ScalarInput], roots: list[Value]) -> tuple:
    ids: dict[int, Any] = {}
    for i, v in enumerate(inputs):
        ids[id(v)] = ("in", i)
    for i, s in enumerate(scalars):
        ids[id(s)] = ("s", i)
    node_index = {id(n): i for i, n in enumerate(order)}

    def ref(a: Any) -> Any:
        if a.__class__ is Value:
            return ids[id(a)] if a.node is None else (node_index[id(a.node)], a.index)
        if a.__class__ is ScalarInput:
            return ids[id(a)]
        if a.__class__ is list:
            return tuple(None if x is None else ref(x) for x in a)
        return a

    body = tuple(
        (n.static_key(), tuple(ref(a) for k, a in zip(n.arg_kinds, n.args) if k not in (ATTR, ATTR_LIST)))
        for n in order
    )
    signature = tuple((v.meta.shape, v.meta.dtype) for v in inputs) + tuple(type(s.value) for s in scalars)
    return body, signature, tuple(ref(r) for r in roots)


# Note [Transposed weights]
# nn.Linear multiplies by its weight's transpose (x @ W.t()), and XLA CPU's product
# kernel reads a transposed right operand slowly when the left one has few rows: on the
# 2-core machine of docs/performance.md, 16x1024 @ (1024x1024).t() took 0.31-0.35 ms
# and 0.21-0.24 ms with the weight stored transposed (PyTorch: 0.38-0.51 ms), 4x512 @
# (2048x512).t() 0.17 against 0.08 ms, 64 rows 0.92 against 0.75 ms. With one row, with
# 128 rows or more, or with weights of up to 512x256 elements, the two are about the
# same. So an input the graph reads only through that transpose, as the right operand
# of mm or addmm with 2 to 64 rows on the left, with at least 2**18 elements, and does
# not write, is given to the executable as a transposed copy. The copy is made once per
# array and kept while the array lives: once per parameter in inference, at the cost of
# its memory again (`config.transposed_weight_copies = False` turns this off). Training
# graphs also read the weight untransposed (the input's gradient), so they take their
# inputs as they are.
# The products whose right operand may come transposed are the manifest's policy
# `transposed_weight_operands`: op -> (right, left) operand positions.
TRANSPOSED_WEIGHT_ROWS = range(2, 65)
TRANSPOSED_WEIGHT_MIN_ELEMENTS = 1 << 18


def _transposed_inputs(order: list[Node], in_pos: dict[int, int], read_only: set[int], roots: list[Value]) -> set[int]:
    """Positions of the inputs to pass transposed (Note [Transposed weights])."""
    reads: dict[int, int] = {}  # id(strided_read node) -> position of the input it transposes
    strided_read = node("strided_read")
    products = policy("transposed_weight_operands")
    for n in order:
        if n.__class__ is strided_read:
            base, size, stride, offset = n.args
            shape = base.meta.shape
            if (id(base) in read_only and len(shape) == 2 and shape[0] * shape[1] >= TRANSPOSED_WEIGHT_MIN_ELEMENTS
                    and offset == 0 and tuple(size) == shape[::-1] and tuple(stride) == (1, shape[1])):
                reads[id(n)] = in_pos[id(base)]
    chosen = set(reads.values())

    def use(a: Any, consumer: Node | None, position: int) -> None:
        if a.__class__ is list:
            for x in a:
                use(x, None, -1)
        elif a.__class__ is Value:
            if a.node is None:
                if not (consumer.__class__ is strided_read and id(consumer) in reads):
                    chosen.discard(in_pos.get(id(a)))
            elif id(a.node) in reads:
                right, left = products.get(getattr(consumer, "name", None), (None, None))
                if position != right or consumer.args[left].meta.shape[0] not in TRANSPOSED_WEIGHT_ROWS:
                    chosen.discard(reads[id(a.node)])

    for n in order:
        for i, a in enumerate(n.args):
            use(a, n, i)
    for r in roots:
        use(r, None, -1)
    return chosen


_TRANSPOSED_COPIES: dict[int, tuple[weakref.ref, Any]] = {}  # id(array) -> (weak reference to it, its transpose)
_transpose = eager_jit(jax.numpy.transpose)


def _transposed_copy(a: Any) -> Any:
    """`a`'s transpose, made once for as long as `a` lives (Note [Transposed weights])."""
    entry = _TRANSPOSED_COPIES.get(id(a))
    if entry is not None and entry[0]() is a:
        return entry[1]
    out = _transpose(a)
    if isinstance(a, jax.core.Tracer):
        return out
    key = id(a)
    _TRANSPOSED_COPIES[key] = (weakref.ref(a, lambda _: _TRANSPOSED_COPIES.pop(key, None)), out)
    return out


# Note [Donated graph inputs]
# A compiled training step writes its parameters and optimizer state back into their
# storages. Given as plain inputs, each is read and written to a new buffer every step:
# for an embedding table updated in a few rows (Note [Sparse updates]) that is two
# passes over the table where the update touches a few rows. So a graph takes over
# (jax.jit's donation) the buffers of the inputs whose storages it writes, from
# config.donate_min_bytes (1 MB) up, and XLA updates them in place: the medium zoo
# DLRM's compiled SGD step went from 3.5-4.0 to 1.9-2.0 ms (PyTorch: 4.0-5.4 ms).
# Below that size donation costs more than it saves (docs/performance.md).
# A donated array must have no other owner: the storage (or, while tracing, the graph
# input) and the argument list hold it, nothing else, which the executable checks by
# reference count before each run; an array also held elsewhere (handed out by to_jax,
# shared by another storage, kept by compile() while it learns a replay plan) is
# donated as a copy instead. A replay donates only arrays of storages it writes back
# from that graph, and only when no guard can fail after the graph ran (one graph, no
# values read back): a failed guard traces the call again from the storages as they
# were.
#
# Two things decide whether XLA writes a donated buffer in place or copies it first:
# - which output it writes there. jax.jit gives each donated input, in input order, the
#   first output not taken yet of the same shape and dtype, whatever the program
#   computes; AdamW's two state tensors per parameter, or a momentum buffer and its
#   parameter's gradient, share shapes, so a state's buffer could receive a gradient
#   and XLA copied the old state out of the way. The new values of the donated inputs
#   are therefore the graph's first outputs, in the order of the inputs.
# - whether every other read of the old value is ordered before the write by the
#   program's data flow. A weight that the backward also multiplies by (the input's
#   gradient, g @ W, on which W's own update does not depend) is read in no such
#   order, and XLA CPU honours no other (optimization barriers are dropped before copy
#   insertion), so it copies the whole weight at the start of the step: the memory a
#   fresh output buffer would take, plus a pass over it. So the node computing the new
#   value is made to wait for the late readers (those of the nodes reading the old
#   value, through views and casts, which XLA fuses into their consumers, that are not
#   its ancestors): one of its operands gets, added to its bits, an integer zero drawn
#   from one element of each late reader's output, which XLA cannot prove to be zero
#   (min(max(x, 0), 0); x & 0 and x - x it folds). Where no operand can carry that
#   (lists, booleans) the input is not donated.
# Measured: the medium zoo MLP's compile()d SGD step took 2.1-2.3 ms with its 1024x1024
# weight copied and 2.0-2.5 ms written in place (PyTorch: 1.7-1.9 ms); its AdamW step
# 4.7-5.3 ms before these changes and 2.9-3.2 ms after (PyTorch: 3.8-4.0 ms). Four
# Linear(4096, 4096) layers under momentum SGD at batch 16: a step's peak memory 1.52 GB
# with each weight written in place, 1.71 GB with the three the backward reads not
# donated (160 against 199-206 ms a step with glibc's malloc defaults, where each fresh
# 64 MB buffer is mapped and faulted in anew).


# Note [Labelled nodes]
# The analysis (frontends/analyze.py) names the call site of every instruction of a
# compiled graph. While it watches a trace it labels the nodes each op records (id(node)
# -> label), and a graph built meanwhile runs a labelled node's lowering in a named scope
# of its label inside the op's own scope: `aten::addmm/site3/dot_general` in the op_name
# metadata. Empty otherwise, which costs one test per node when a graph is built.
NODE_LABELS: dict[int, str] = {}


def _labelled_lowering(cls: type[Node], label: str) -> Callable:
    name = scope_name(cls)
    lower = cls.lower

    def fn(*args: Any) -> Any:
        with jax.named_scope(name), jax.named_scope(label):
            return lower(*args)

    return fn


def _build(order: list[Node], inputs: list[Value], scalars: list[ScalarInput], roots: list[Value],
           read_only: set[int], donation: _Donation) -> Callable:
    """The graph as a function of its inputs' arrays and its scalars. `read_only`: the
    ids of the inputs whose storages the graph does not write; `donation`: the inputs
    whose buffers it takes over (Note [Donated graph inputs])."""
    donated = donation.inputs
    # The function closes over the recorded nodes' structure only through positions, so
    # a cached executable is valid for any graph with the same key.
    in_pos = {id(v): i for i, v in enumerate(inputs)}
    transposed = _transposed_inputs(order, in_pos, read_only, roots) if config.transposed_weight_copies else set()
    sc_pos = {id(s): i for i, s in enumerate(scalars)}
    node_pos = {id(n): i for i, n in enumerate(order)}

    def ref(a: Any) -> Any:
        if a.__class__ is Value:
            return ("in", in_pos[id(a)]) if a.node is None else ("node", node_pos[id(a.node)], a.index)
        if a.__class__ is ScalarInput:
            return ("scalar", sc_pos[id(a)])
        if a.__class__ is SpecialScalar:
            return ("const", scalar_operand(a.value))  # a constant of the program
        if a.__class__ is list:
            return ("list", [None if x is None else ref(x) for x in a])
        return ("const", a)

    strided_read = node("strided_read")

    def step(n: Node) -> tuple:
        if n.__class__ is strided_read and in_pos.get(id(n.args[0])) in transposed:
            return _same, [ref(n.args[0])]  # the input arrives transposed
        label = NODE_LABELS.get(id(n)) if NODE_LABELS else None
        lower = _labelled_lowering(type(n), label) if label is not None else scoped_lowering(type(n))
        refs = [ref(a) for a in n.args]
        after = donation.after.get(id(n))
        if after:
            return _ordered_after(lower, len(refs), donation.operand[id(n)]), refs + [ref(v) for v in after]
        return lower, refs

    program = [step(n) for n in order]
    # the new values of the donated inputs first, in input order (Note [Donated graph inputs])
    taken = set(donation.roots)
    permutation = list(donation.roots) + [k for k in range(len(roots)) if k not in taken]
    outputs = [ref(roots[k]) for k in permutation]
    restore = None if permutation == sorted(permutation) else [permutation.index(k) for k in range(len(roots))]
    kept = tuple(i for i in range(len(inputs)) if i not in donated)

    def run(donated_arrays, kept_arrays, scalar_values):
        arrays = [None] * (len(donated_arrays) + len(kept_arrays))
        for i, a in zip(donated, donated_arrays):
            arrays[i] = a
        for i, a in zip(kept, kept_arrays):
            arrays[i] = a
        return run_program(program, outputs, arrays, scalar_values)

    op_counts = Counter(type(n).name for n in order)
    executable = jax.jit(channels_last.for_graph(fold_sparse_updates(run) if may_fold(op_counts) else run, op_counts),
                         donate_argnums=0 if donated else (), compiler_options=graph_compiler_options(op_counts))
    transposed_kept = tuple(k for k, i in enumerate(kept) if i in transposed)
    # Note [First calls of compiled graphs]: None once the executable is compiled
    first = None

    def call(arrays: list, scalar_values: list, donate: bool = True) -> Any:
        """Run the graph on `arrays`, a list the caller made for this call, each donated
        one held besides only by its storage or graph input (Note [Donated graph inputs])."""
        out = run_permuted(arrays, scalar_values, donate)
        return out if restore is None else [out[j] for j in restore]

    def run_permuted(arrays: list, scalar_values: list, donate: bool) -> Any:
        nonlocal first
        if first is not None:
            out = first.run(arrays, scalar_values)
            if out is not None:
                return out
            first = None
        if not donated and not transposed_kept:
            return executable([], arrays, scalar_values)
        given = []
        for i in donated:
            # references: `arrays`, the storage or input Value, getrefcount's argument
            if not donate or sys.getrefcount(arrays[i]) > 3:
                given.append(copy_array(arrays[i]))
            else:
                given.append(arrays[i])
        rest = [arrays[i] for i in kept]
        for k in transposed_kept:
            rest[k] = _transposed_copy(rest[k])
        return executable(given, rest, scalar_values)

    def lower(arrays: list, scalar_values: list) -> Any:
        """jax's Lowered of this graph for inputs like `arrays` (arrays or
        ShapeDtypeStructs) and `scalar_values`: its StableHLO and HLO text."""
        rest = [arrays[i] for i in kept]
        for k in transposed_kept:
            rest[k] = jax.ShapeDtypeStruct(tuple(rest[k].shape)[::-1], rest[k].dtype)
        return executable.lower([arrays[i] for i in donated], rest, scalar_values)

    if config.first_calls_on_cpu and interpretable({type(n) for n in order}):
        # the nodes' own operands (transposed inputs are read by their strided reads)
        first = FirstCalls([(type(n), [ref(a) for a in n.args]) for n in order], outputs, lower)
    call.donated = donated
    call.lower = lower
    call.executable = executable
    return call


def _donation_candidates(inputs: list[Value], written: dict[int, Value], read_only: set[int]) -> tuple[int, ...]:
    """Positions of the inputs whose buffers a graph may take over: the values of
    storages it writes, when large enough (Note [Donated graph inputs]). `written`: id
    of an input that held a storage's value when the trace wrote it -> the storage's new
    value; `read_only`: inputs a storage still holds."""
    return tuple(
        i for i, v in enumerate(inputs)
        if id(v) in written and id(v) not in read_only and not isinstance(v.data, jax.core.Tracer)
        and v.data.nbytes >= config.donate_min_bytes
    )


_PASS_THROUGH = ("strided_read", "cast_to")  # read as part of their consumers once XLA fuses them


@dataclass(frozen=True)
class _Donation:
    """What a graph donates (Note [Donated graph inputs]): the positions of the inputs,
    those of their new values among the roots, and for a node computing a new value
    that must wait for readers of the old one, the values it waits for (`after`) and
    the position of the operand that carries the wait (`operand`), by id of the node."""

    inputs: tuple[int, ...] = ()
    roots: tuple[int, ...] = ()
    after: dict[int, list[Value]] = field(default_factory=dict)
    operand: dict[int, int] = field(default_factory=dict)


def _plan_donation(order: list[Node], inputs: list[Value], written: dict[int, Value],
                   candidates: tuple[int, ...], candidate_roots: tuple[int, ...]) -> _Donation:
    """The candidates XLA can write in place, and the waits that let it (Note [Donated
    graph inputs])."""
    if not candidates:
        return _Donation()
    pass_through = tuple(node(name) for name in _PASS_THROUGH)
    position = {id(n): i for i, n in enumerate(order)}
    readers: dict[int, list[Node]] = {}  # id(value) -> nodes taking it as an argument
    read: dict[int, dict[int, Value]] = {}  # id(node) -> its outputs that nodes read, by id
    for n in order:
        for a in n.args:
            for x in (a if a.__class__ is list else (a,)):
                if x.__class__ is Value:
                    readers.setdefault(id(x), []).append(n)
                    if x.node is not None:
                        read.setdefault(id(x.node), {})[id(x)] = x

    def effective_readers(v: Value) -> list[Node]:
        out, stack = [], [v]
        while stack:
            for n in readers.get(id(stack.pop()), ()):
                if n.__class__ in pass_through:
                    stack.extend(read.get(id(n), {}).values())
                else:
                    out.append(n)
        return out

    def not_ancestors(root: Node, nodes: list[Node]) -> list[Node]:
        wanted = {id(n): n for n in nodes}
        lowest = min(position[i] for i in wanted)
        seen, stack = {id(root)}, [root]
        while stack and wanted:
            for a in stack.pop().args:
                for x in (a if a.__class__ is list else (a,)):
                    if x.__class__ is Value and x.node is not None and id(x.node) not in seen:
                        seen.add(id(x.node))
                        wanted.pop(id(x.node), None)
                        if position[id(x.node)] > lowest:
                            stack.append(x.node)
        return list(wanted.values())

    chosen, chosen_roots, after, operand = [], [], {}, {}
    for i, k in zip(candidates, candidate_roots):
        new = written[id(inputs[i])].node
        others = [n for n in effective_readers(inputs[i]) if n is not new]
        if others and new is None:  # the new value is another input: nothing can wait
            continue
        late = not_ancestors(new, others) if others else []
        if late:
            # the new value waits for each late reader's first output; readers placed after
            # it in the topological order could depend on it, and no operand can wait
            waits = [next(iter(read.get(id(n), {}).values()), None) for n in late]
            carrier = next((j for j, a in enumerate(new.args) if a.__class__ is Value and _can_wait(a)), None)
            if carrier is None or any(v is None or position[id(n)] > position[id(new)] for v, n in zip(waits, late)):
                continue
            after.setdefault(id(new), []).extend(waits)
            operand[id(new)] = carrier
        chosen.append(i)
        chosen_roots.append(k)
    return _Donation(tuple(chosen), tuple(chosen_roots), after, operand)


def _can_wait(v: Value) -> bool:
    """Whether `_wait_for` can tie a value of v's dtype to others."""
    return v.meta.dtype.is_floating_point or (not v.meta.dtype.is_complex and v.meta.dtype != torch.bool)


def _wait_for(x: Any, values: list) -> Any:
    """x, unchanged, computed after `values`: x's bits plus an integer zero XLA cannot
    prove to be zero, drawn from one element of each value. XLA CPU orders a program's
    instructions by their data flow only (Note [Donated graph inputs])."""
    zero = jnp.zeros((), jnp.int32)
    for v in values:
        if v.size:
            first = v.reshape(-1)[0]
            first = first.real if jnp.iscomplexobj(first) else first
            zero = zero + jnp.minimum(jnp.maximum(first.astype(jnp.int32), 0), 0)
    if jnp.issubdtype(x.dtype, jnp.floating):
        bits = jnp.dtype(f"int{jnp.dtype(x.dtype).itemsize * 8}")
        return lax.bitcast_convert_type(lax.bitcast_convert_type(x, bits) + zero.astype(bits), x.dtype)
    return x + zero.astype(x.dtype)


def _ordered_after(lower: Callable, count: int, operand: int) -> Callable:
    """`lower` on its first `count` arguments, its `operand`-th made to wait for the rest."""
    def fn(*args: Any) -> Any:
        args = list(args)
        args[operand] = _wait_for(args[operand], args[count:])
        return lower(*args[:count])

    return fn


copy_array = eager_jit(lambda a: jax.numpy.array(a, copy=True))


def _same(x: Any) -> Any:
    return x


def _why(old: tuple, new: tuple) -> str:
    old_body, old_sig, _, old_donated, old_settings = old
    new_body, new_sig, _, new_donated, new_settings = new
    if old_settings != new_settings:
        return "config.transposed_weight_copies or config.channels_last_convolutions changed"
    if old_sig != new_sig:
        for i, (a, b) in enumerate(zip(old_sig, new_sig)):
            if a != b:
                return f"graph input {i} changed from {a} to {b}"
        return f"the graph has {len(new_sig)} inputs instead of {len(old_sig)}"
    if len(old_body) != len(new_body):
        return f"the graph has {len(new_body)} ops instead of {len(old_body)}"
    for i, (a, b) in enumerate(zip(old_body, new_body)):
        if a != b:
            return f"op {i} ({b[0][0].op}) changed: {a[0][1:]} -> {b[0][1:]}"
    if old_donated[0] != new_donated[0]:
        return f"the graph writes other inputs: inputs {list(new_donated[0])} instead of {list(old_donated[0])}"
    if old_donated != new_donated:
        return f"the graph writes inputs {list(new_donated[0])} from other outputs"
    return "the graph's outputs changed"


# Functions called with (fn, inputs, scalars) for every graph a trace runs, built or
# from the cache: `xla_native_functions.hlo()` listens here.
GRAPH_WATCHERS: list[Callable] = []


def input_spec(v: Value) -> Any:
    """The abstract value of a graph input, for lowering the graph again (with its
    sharding, where it is laid out over devices: docs/distributed.md)."""
    aval = jax.typeof(v.data)
    sharding = getattr(v.data, "sharding", None) if getattr(v.data, "committed", False) else None
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type, sharding=sharding)


def dump_graph(text: str, kind: str) -> None:
    """Write one program's text into `config.debug_dump_graphs`, named by process,
    sequence and kind (`compile`, `dynamo`)."""
    directory = config.debug_dump_graphs
    os.makedirs(directory, exist_ok=True)
    _DUMPED[0] += 1
    path = os.path.join(directory, f"{os.getpid()}-{_DUMPED[0]:04d}-{kind}.mlir")
    with open(path, "w") as f:
        f.write(text)


_DUMPED = [0]


def lower_graph(roots: list[Value], written: dict[int, Value], read_only: set[int], segment: int) -> tuple:
    """The compiled function of the graph computing `roots` (from the cache, or built
    and counted as a compilation, with the reason when it replaces the graph last run
    at this position of a trace), and its inputs: (fn, inputs, scalars, key, built).
    `written` and `read_only` as in _donation_candidates."""
    order, inputs, scalars = _collect(roots)
    candidates = _donation_candidates(inputs, written, read_only)
    root_pos = {id(r): k for k, r in reversed(list(enumerate(roots)))}
    candidate_roots = tuple(root_pos[id(written[id(inputs[i])])] for i in candidates)
    # the key holds the graph's structure, from which the donated subset follows, and
    # the settings the program is built with
    settings = (config.transposed_weight_copies, config.channels_last_convolutions)
    key = _graph_key(order, inputs, scalars, roots) + ((candidates, candidate_roots), settings)
    fn = _GRAPH_CACHE.get(key)
    built = fn is None
    if built:
        metrics.cache_misses += 1
        previous = _LAST_KEYS.get(segment)
        if previous is not None:
            metrics.recompile_reasons.append(_why(previous, key))
        elif segment:
            metrics.recompile_reasons.append(
                f"graph {segment + 1} of one trace: a host read (.item(), printing, a data-dependent "
                "shape) ran the graph recorded so far, and the trace continued in a new graph"
            )
        fn = _build(order, inputs, scalars, roots, read_only,
                    _plan_donation(order, inputs, written, candidates, candidate_roots))
        _GRAPH_CACHE[key] = fn
        if config.debug_dump_graphs:
            with X64:
                lowered = fn.lower([input_spec(v) for v in inputs], [scalar_operand(s.value) for s in scalars])
                dump_graph(lowered.as_text(debug_info=True), "compile")
    else:
        metrics.cache_hits += 1
    _LAST_KEYS[segment] = key
    for watch in GRAPH_WATCHERS:
        watch(fn, inputs, scalars)
    return fn, inputs, scalars, key, built
