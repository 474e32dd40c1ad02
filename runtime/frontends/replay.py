"""compile(): trace a call, then replay its executable without re-running the Python.

Note [Replay]
Tracing every call (runtime/exec/trace.py) costs about 12 us of Python per op, which on
small models is more than the work itself. So `compile(fn)` traces the first calls of
each call signature with a `Probe` watching, turns each trace into a `Plan` (where
every graph input comes from, where every output goes, what the call returns, which
`.grad`s it sets) and, once two consecutive traces give the same plan, replays it with
straight-line Python generated for that plan (`generate_replay`): read the inputs'
current arrays, run the cached executables, write the results back, build the returned
tensors. No op runs through Python.

A plan is only made when the trace shows nothing a replay would get wrong:
  - no op writing a CPU tensor made before the call (default AdamW keeps its step
    counter on the CPU and computes its step size from `.item()`; one the call only
    reads is a guarded constant, Note [CPU constants]), no CPU fallback op, no explicit
    torch.Generator;
  - no tensor created by the call kept anywhere except the returned value, `.grad`
    and the attributes of the modules it calls (a list, new optimizer state), counted
    by references (Note [Module attributes the call sets]); no argument or returned
    tensor kept either (Note [Arguments kept by the call], Note [Results kept by the call]);
  - no returned tensor that requires grad unless the call ran backward itself (a replay
    builds no autograd graph; the loss of a training step comes back detached).
A value read on the host (`.item()`, a data-dependent shape) cuts the trace into
several graphs; the replay runs them in turn and compares each value read with the
traced one before going on, so it guards the Python that depended on it (another
value is another path: Note [Paths of a call]). Two equal
consecutive plans also mean the Python numbers the graphs received did not change
between calls. Before each replay, guards check the call signature (structure, shapes,
strides, dtypes, Python values of the arguments), every tensor the call reads besides
its arguments is alive and holds the traced storage (whose array keeps its shape and
dtype for life, Note [Views and mutation]), the arguments' arrays have the traced
shapes and dtypes, `.grad`s are in the traced state (None
or not), grad mode, the hyperparameters of every optimizer stepped in the call (a
scheduled learning rate) and the `training` flag of every module called. A failed
guard traces the call again, with nothing written. Python state beyond these (a
global counter, an attribute read by the function) is taken as constant, as jax.jit
does; `compile(fn, replay=False)` traces every call instead.

Note [Probing again]
A probe (a trace watched for what a replay needs) costs about 1.5x a plain trace, so a
signature whose traces keep differing stops being probed after MAX_PROBES. Some steps
settle later: a learning rate warmed up for a few hundred steps, then held. So after
PROBE_AGAIN_AFTER calls traced without probing, two consecutive calls are probed again
(a plan still needs two agreeing traces), and the interval doubles up to
MAX_PROBE_INTERVAL: a step that never settles spends at most about one call in eight
probing, then one in 500.

Note [Paths of a call]
Host reads can send one signature's calls down several paths: a generation loop stops
after as many tokens as its stopping check reads, a training step skips its update on
a non-finite gradient. A replay whose read differs from its plan's returns before any
effect (its graphs ran, but nothing is written back and no buffer was donated), so a
signature keeps up to MAX_PLANS plans, one per path, tried from the one replayed last;
a call that none replays is traced, and its path's plan joins the others once two
consecutive traces agree on it. Agreement stays consecutive: a path met again after a
different one could differ by Python state that no guard covers (a counter deciding a
branch), which consecutive equal traces rule out as before.

Note [CPU constants]
A CPU tensor made before the call and only read by it (transformers' BEiT caches its
relative position index, a CPU tensor, with functools.lru_cache, and indexes with it on
every call) enters the graph as a constant, as a NumPy array closed over by a jax.jit
function does. The plan keeps a copy of its values and the replay compares them with
the tensor's (a microsecond or two at these sizes): a tensor that died or holds other
values traces the call again. Values, not the version counter, because writes through
NumPy sharing the memory, or through `.data`, bump no counter. A tensor over
CPU_CONSTANT_BYTES (a staging buffer the step copies from) fails the probe instead, as
does an op that writes such a tensor in the call (default AdamW's step counter): a
replay would skip the write.

Note [Modules made by the call]
What a step reads from a module is its tensors (guarded through their storages like
any other) and its `training` flag. A module the call made and dropped (DistilBERT's
`nn.ReLU()(x)`, an activation from transformers' ACT2FN, a `CrossEntropyLoss()` built
in forward) is part of the Python a replay skips: its flag is fixed by that Python, so
the plan keys it by class and flag, not by its id (which a new one never shares), and
guards only the modules still alive after the call.

Note [Module attributes the call sets]
A module may keep a tensor of the call in an attribute: RecurrentGemma's recurrent
block stores its final state, a model its last input or attention map. A replay that
skipped the assignment would leave the traced call's tensor there. So after a probe the
attributes and buffers of every module the call ran are scanned, and each that holds a
tensor the call made, an argument, or a view of an argument is an effect of the plan:
every replay sets it again to the new call's tensor (the same object where the call
also returns it), directly in the module's `__dict__` or `_buffers`, as
`nn.Module.__setattr__` would. One that requires grad is accepted as a returned tensor
is, only when the call ran backward itself, and it is set detached. A tensor a module
held when called that the call reads and then replaces (state carried from call to
call: `self.mean = 0.9 * self.mean + ...`) keeps the call traced: the tensor read dies
in the call, and a replay would have read its values as a constant.

Note [Arguments kept by the call]
An argument, or a view of it, that the call keeps where a replay does not look (a list,
a dict, an object other than a module it calls) would still hold the traced call's
argument after a replay. A probe counts the references to each argument tensor and to
its storage before and after the call; more than the result, the plan's module
attributes, the probe itself and PyTorch's view metadata hold (a live view's base gets
one reference from C++, however many views; Note [Views kept by views]) means the call
kept it, and its signature stays traced from then on: a call given the same tensor
again finds it already where it puts it, which counting cannot see.

Note [Results kept by the call]
A returned tensor is one object in the result and in any list, dict or object that the
call also put it in (`losses.append(loss)`, a hook storing its output); a replay returns
a new tensor and leaves the traced one there. The same holds for a new `.grad` or module
attribute the call also keeps elsewhere. Storage counts cannot see this (it is the same
tensor), so a probe counts the references to each tensor a replay makes anew: those
beyond the result's own containers, the module attributes the plan sets and a `.grad`'s
slot mean kept. One more can be PyTorch's own while C++ shares the tensor (a live view's
base); then the tensor's referrers decide (a walk of the heap, about 40 ms with
transformers loaded, paid only then; the zoo's steps never need it).

Note [Modules rebound between calls]
A step reaches its parameters, buffers and submodules through Python attributes, which a
replay does not run: a head replaced between calls (`model.classifier = nn.Linear(...)`,
a parameter or buffer assigned anew) while the old one stays alive (an optimizer, a
user's variable holds it) would be read through the plan's reference to the old one.
nn.Module's global registration hooks see every such assignment; one that replaces a
module or tensor some plan reads counts as a rebinding, and a plan made before the last
rebinding traces again (one integer compared per replay). A plain tensor attribute of a
module the call runs (not a parameter or buffer: `self.scale = torch.tensor(2.0)`) has no
hook, so the replay checks that each one the plan reads is still the module's attribute.

Note [Views kept by views]
A view of a view keeps the view it was made from alive: PyTorch's view metadata
(ADInplaceOrView's `as_view`) stores, for a tensor like ours that does not support
as_strided, a function that inverts the view op and holds that op's `self`, chained
through every earlier view. So `x.view(3, 1, 3).squeeze(1)` returned from a call keeps
the (3, 1, 3) view alive, with nothing in Python referring to it, and the storage of
the result had one tensor more than the returned value accounts for: every call
returning such a tensor (nn.MultiheadAttention's unbatched and batch_first outputs,
`.view(...).transpose(...)` at the end of a model) was taken for one that keeps a
tensor it made, and traced every time. Such a view is invisible to the program; a
replay needs no tensor for it. `_kept_by_views` counts, among the views the call made
(the probe records every result of a view op), those on the storage that only PyTorch
holds: exactly one reference besides ours (torch 2.13's TensorImpl holds one on its
Python object while C++ shares it) and no referrer the garbage collector knows. A view
the program kept in a list or an attribute has that referrer, and still escapes.
Inference tensors get no view metadata, which is why the same calls replayed under
inference_mode.
"""

from __future__ import annotations

import collections
import functools
import gc
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import _pytree
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..core.context import context
from ..core.convert import X64
from ..core.inference import made_in_mode, made_like
from ..core.sharing import WRITE_LOCK
from ..core.tensor import DEVICE, Storage, XlaTensor, reinterpreting_view_on, storage_of, tensor_on
from ..exec.eager import scalar_operand
from ..exec.graph import copy_array
from ..exec.graph_first_call import compiles_held
from ..exec.keys import key_array
from ..exec.trace import active_traces, tracing
from ..platform.config import config
from ..platform.metrics import ReplayedOps, metrics

ARG, OBJ, KEY, CONST, SEG = "arg", "obj", "key", "const", "seg"
# Traces of one signature without a plan confirmed, after which it is traced without
# probing, probed again after PROBE_AGAIN_AFTER such calls, twice as many each time up to
# MAX_PROBE_INTERVAL (Note [Probing again]).
MAX_PROBES = 6
PROBE_AGAIN_AFTER = 16
MAX_PROBE_INTERVAL = 1024
# CPU tensors made before the call up to this size that it reads are constants of its
# replay, compared by value (Note [CPU constants]).
CPU_CONSTANT_BYTES = 64 * 1024
# Plans kept per signature, one per path its host reads take (Note [Paths of a call]).
MAX_PLANS = 8
# Call signatures remembered per compiled function.
MAX_SIGNATURES = 64
_SIMPLE = (int, float, bool, str, type(None), complex, torch.dtype, torch.device)
_LIFT_FRESH = torch.ops.aten.lift_fresh.default


class Probe:
    """What one traced call touched: the observer of its trace (Note [Trace observers] in
    exec/trace.py)."""

    def __init__(self):
        # Storages that existed before the call (or were made concrete in it) and that the
        # trace read or wrote: id -> the stablest tensor on it (the base of a view). `held`
        # is the probe's only strong reference to them, which build_plan counts on.
        self.owners: dict[int, weakref.ref] = {}
        self.held: dict[int, Storage] = {}
        self.input_store: dict[int, int] = {}  # id(graph input Value) -> id(its storage)
        # storages a graph of this call wrote: id -> (graph, output position, weakref)
        self.produced: dict[int, tuple] = {}
        self.input_seg: dict[int, tuple] = {}  # id(graph input Value) -> (graph, output position)
        # values read on the host: ("root", graph, output position, array) or
        # ("input", graph being recorded, input Value, array)
        self.reads: list[tuple] = []
        self.keys: set[int] = set()  # storages of random keys drawn during the call
        self.graphs: list[tuple] = []
        self.failure: str | None = None
        self.optimizers: dict[int, Any] = {}
        # modules called, in order of first call: (weakref, class, training flag); a
        # module made by the call and dropped is part of the Python a replay skips
        self.modules: list[tuple] = []
        self.module_refs: dict[int, weakref.ref] = {}
        # storages of the tensors each called module held when it was called (Note
        # [Module attributes the call sets])
        self.module_state: set[int] = set()
        # id(tensor) -> its version counter before the call wrote through it (None: an
        # inference tensor, which has none): for the arguments and the owners of storages
        self.versions: dict[int, int | None] = {}
        # every tensor a view op of the call returned (Note [Views kept by views])
        self.views: list[weakref.ref] = []
        # CPU tensors made before the call that it only reads (Note [CPU constants]):
        # id -> (weakref, a copy of its values)
        self.cpu_constants: dict[int, tuple] = {}

    def note_owner(self, store: Storage, t: XlaTensor, v: Any) -> None:
        sid = id(store)
        made = self.produced.get(sid)
        if made is not None and made[2]() is store:  # written by an earlier graph of the call
            if v is not None:
                self.input_seg[id(v)] = made[:2]
            return
        if sid not in self.owners:
            base = t
            while base._base is not None:
                base = base._base
            if base.__class__ is not XlaTensor or base._store is not store:
                base = t
            self.owners[sid] = weakref.ref(base)
            self.held[sid] = store
            self.versions.setdefault(id(base), version_of(base))
        if v is not None:
            self.input_store[id(v)] = sid

    def note_key(self, store: Storage) -> None:
        self.keys.add(id(store))
        self.held[id(store)] = store

    def note_graph(self, pending, inputs, scalars, key, fn) -> None:
        j = len(self.graphs)
        for k, s in enumerate(pending):
            self.produced[id(s)] = (j, k, weakref.ref(s))
        self.graphs.append(([weakref.ref(s) for s in pending], inputs, scalars, key, fn))

    def note_read(self, v: Any, store: Storage | None, array: Any) -> None:
        """A value read on the host: an input Value, or the storage a graph just wrote."""
        if store is None:
            self.reads.append(("input", len(self.graphs), v, np.asarray(array)))
            return
        made = self.produced.get(id(store))
        if made is None or made[2]() is not store:
            self.fail("it reads a tensor's value on the host in a way a replay cannot check")
            return
        self.reads.append(("root", made[0], made[1], np.asarray(array)))

    def fail(self, why: str) -> None:
        if self.failure is None:
            self.failure = why


class _HostOpWatch(TorchDispatchMode):
    """Watches the call's ops on CPU tensors. CPU tensors the call makes from Python
    values (`torch.triu_indices`) are constants, compared between traces like any other;
    one made before the call that it only reads is a constant whose values the replay
    compares (Note [CPU constants]); an op that writes one (default AdamW's step counter)
    fails the probe: a replay would skip it."""

    def __init__(self, probe: Probe):
        super().__init__()
        self.probe = probe
        self.made: dict[int, weakref.ref] = {}
        # views of CPU tensors made before the call: what writing them would change
        self.aliases: dict[int, weakref.ref] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(func, "is_view", False):
            for x in (out,) if out.__class__ is XlaTensor else out if isinstance(out, (list, tuple)) else ():
                if x.__class__ is XlaTensor:
                    self.probe.views.append(weakref.ref(x))
        if func is _LIFT_FRESH:
            # torch.tensor / torch.as_tensor of Python data (pack_padded_sequence's
            # lengths): its argument was just made from values, a constant of the call
            self.made[id(out)] = weakref.ref(out)
            return out
        if self.probe.failure is None:
            written = _written_tensors(func, args, kwargs)
            before_call = False
            for x in _cpu_tensors((args, tuple(kwargs.values()))):
                if self._known(self.made, x):
                    continue
                if id(x) in written:
                    self.probe.fail(self._host_op_reason(func, x, "writes"))
                    return out
                if x.numel() * x.element_size() > CPU_CONSTANT_BYTES:
                    self.probe.fail(self._host_op_reason(func, x, "reads"))
                    return out
                before_call = True
                if not self._known(self.aliases, x) and id(x) not in self.probe.cpu_constants:
                    self.probe.cpu_constants[id(x)] = (weakref.ref(x), x.detach().clone())
            for x in _cpu_tensors((out,)):
                if before_call and getattr(func, "is_view", False):
                    self.aliases[id(x)] = weakref.ref(x)
                else:
                    self.made[id(x)] = weakref.ref(x)
        return out

    def _host_op_reason(self, func: Any, x: torch.Tensor, does: str) -> str:
        what = f"a CPU tensor made before the call (shape {tuple(x.shape)}, {x.dtype})"
        if does == "reads":
            what += f" larger than {CPU_CONSTANT_BYTES // 1024} KiB, whose values a replay would hold fixed,"
        if self.probe.optimizers:  # inside an optimizer's step: its state is on the CPU
            fix = ("default AdamW and Adam keep their step counters on the CPU: "
                   "AdamW(..., capturable=True) keeps them on our device")
        else:
            fix = "move it to our device before the call (xla_native_functions.to_xla), or make it inside the call"
        return f"it {does} {what} with {func}, which a replay would skip ({fix})"

    @staticmethod
    def _known(table: dict[int, weakref.ref], x: torch.Tensor) -> bool:
        ref = table.get(id(x))
        return ref is not None and ref() is x


def _cpu_tensors(values: tuple, found: list | None = None) -> list:
    """The CPU tensors among an op's arguments or results (tensors, and lists and
    tuples of them), in order: a pytree flatten of every op cost 19 us of a probe."""
    found = [] if found is None else found
    for x in values:
        if x.__class__ is XlaTensor:
            continue
        if isinstance(x, torch.Tensor):
            if x.device.type == "cpu":
                found.append(x)
        elif isinstance(x, (list, tuple)):
            _cpu_tensors(x, found)
    return found


def _written_tensors(func: Any, args: tuple, kwargs: dict) -> set[int]:
    """ids of the tensors an op writes (its schema's mutable arguments)."""
    written: set[int] = set()
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.is_mutable:
        return written
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(a.name)
            written.update(id(t) for t in (value if isinstance(value, (list, tuple)) else (value,))
                           if isinstance(t, torch.Tensor))
    return written


def version_of(t: XlaTensor) -> int | None:
    """`t._version`, or None for an inference tensor, which has no version counter."""
    try:
        return t._version
    except RuntimeError:
        return None


class Plan:
    """How to replay one traced call; see Note [Replay]."""

    __slots__ = ("segments", "writebacks", "outputs", "out_spec", "grad_guards", "grad_effects", "optimizers",
                 "modules", "grad_enabled", "inference_mode", "bumps", "fingerprint", "complete", "objects",
                 "object_stores", "args", "whole_args", "requires_grad", "late_reads", "run", "op_counts",
                 "cpu_constants", "attributes")


def _hyperparameters(opt: Any) -> tuple:
    """What a replay guards of an optimizer it steps: each group's hyperparameters and
    parameters (by identity: a parameter taken out of its group is no longer updated),
    and how many parameters have state."""
    groups = []
    for g in opt.param_groups:
        groups.append(tuple((k, v if isinstance(v, (*_SIMPLE, tuple)) else ("id", id(v)))
                            for k, v in g.items() if k != "params"))
        groups.append(tuple(map(id, g["params"])))
    return tuple(groups), len(opt.state)


def _layout(t: XlaTensor) -> tuple:
    return tuple(t.shape), t.dtype, None if t._whole else (tuple(t.stride()), t.storage_offset()), t._reinterprets


def _orphans(probe: Probe, arg_stores: dict[int, int]) -> set[int]:
    """Storages the call touched whose tensor died but that something else still holds
    (a view made inside the call): a replay could not find them. A storage the call only
    read through views made below autograd gets the tensor still on it instead
    (`_live_owner`)."""
    orphans = set()
    for sid, ref in probe.owners.items():
        t = ref()
        if t is None or t._store is not probe.held[sid]:
            # references: probe.held, getrefcount's argument
            if sys.getrefcount(probe.held[sid]) > 2 and sid not in arg_stores:
                # only a storage the call did not write: its version counter is not tracked
                owner = None if sid in probe.produced else _live_owner(probe.held[sid])
                if owner is None:
                    orphans.add(sid)
                else:
                    probe.owners[sid] = weakref.ref(owner)
                owner = None
        t = None
    return orphans


def _live_owner(store: Storage) -> XlaTensor | None:
    """The base tensor still on `store`, if any. The probe keeps the base of the first
    tensor through which the call read a storage; a view made below autograd (inside a
    torch.library custom op such as nn.LinearCrossEntropyLoss's, whose views of a
    parameter have no `_base`) dies with the op, while the parameter it viewed lives on.
    Found through the garbage collector: only for such storages, once per traced call."""
    for d in gc.get_referrers(store):
        if d.__class__ is not dict:
            continue
        for t in gc.get_referrers(d):
            if t.__class__ is XlaTensor and t._store is store and t._base is None and t._whole:
                return t
    return None


def _source_of(sid: int, probe: Probe, arg_stores: dict[int, int], orphans: set[int]) -> tuple | str:
    i = arg_stores.get(sid)
    if i is not None:
        return (ARG, i)
    if sid in probe.keys:
        return (KEY, None)
    ref = probe.owners.get(sid)
    if ref is None:
        return (CONST, None)
    t = ref()
    if t is not None and t._store is probe.held[sid]:
        return (OBJ, ref)
    if sid in orphans:
        return "a tensor it reads or writes is reachable only through a view made inside the call"
    if sid in probe.module_state:
        return ("it reads a tensor a module held before the call and replaces it (state carried from call to "
                "call), which a replay would read as a constant")
    return (CONST, None)  # a temporary made on the host during the call


def _account(accounted: dict[int, set[int]], sid: int, t: XlaTensor) -> None:
    """Count `t`, and the base a view keeps alive, as tensors a replay rebuilds."""
    held = accounted.setdefault(sid, set())
    held.add(id(t))
    base = t._base
    if base is not None and base.__class__ is XlaTensor and id(base._store) == sid:
        held.add(id(base))


def _escaped(alive: dict[int, Storage], accounted: dict[int, set[int]], views: list[weakref.ref]) -> bool:
    """True when a storage made by the call has more tensors on it than the returned
    value and the new .grads account for, besides views only PyTorch's view metadata
    holds (Note [Views kept by views]; `views`: the probe's)."""
    for collected in (False, True):
        if collected:
            gc.collect()  # tensors in reference cycles the collector has not freed yet
        # references: `alive` and getrefcount's argument (no loop variable holds a storage)
        over = [sid for sid in alive if sys.getrefcount(alive[sid]) - 2 > len(accounted.get(sid, ()))]
        if not over:
            return False
    for sid in over:
        kept = _kept_by_views(alive[sid], accounted.get(sid, ()), views)
        if sys.getrefcount(alive[sid]) - 2 > len(accounted.get(sid, ())) + kept:
            return True
    return False


def _kept_by_views(store: Storage, accounted: set[int], views: list[weakref.ref]) -> int:
    """How many views on `store`, made by the call and not accounted for, nothing in
    Python refers to: PyTorch's metadata of a later view holds them (Note [Views kept by
    views])."""
    frames = set()
    f = sys._getframe()
    while f is not None:  # this thread's frames, which refer to tensors only as locals here
        frames.add(id(f))
        f = f.f_back
    seen, kept = set(), 0
    for ref in views:
        t = ref()
        if t is None or id(t) in seen or id(t) in accounted or t._store is not store:
            continue
        seen.add(id(t))
        # references: `t`, getrefcount's argument and the one PyTorch takes on a tensor's
        # Python object while C++ shares the tensor; and no Python object refers to it
        if sys.getrefcount(t) == 3 and all(id(r) in frames for r in gc.get_referrers(t)):
            kept += 1
    return kept


def _argument_references(leaves: Any) -> tuple[list, list]:
    """Each argument tensor with its storage, and how many references each has."""
    pairs = [(x, x._store) for x in {id(x): x for x in leaves if x.__class__ is XlaTensor}.values()]
    return pairs, _reference_counts(pairs)


def _reference_counts(pairs: list[tuple]) -> list[tuple[int, int]]:
    return [(sys.getrefcount(x), sys.getrefcount(store)) for x, store in pairs]


def _grown(before: tuple[list, list], now: list[tuple[int, int]], result: Any) -> list[tuple]:
    """The arguments that gained references during the call (`now`: their counts just
    after it, with `result` held once), themselves or through their storages, beyond
    the result's own (Note [Arguments kept by the call])."""
    pairs, counts = before
    if all(n <= b and m <= c for (n, m), (b, c) in zip(now, counts)):
        return []
    in_result = [x for x in tree_flatten(result)[0] if x.__class__ is XlaTensor]
    grown = []
    for (n, m), (refs, store_refs), (x, store) in zip(now, counts, pairs):
        n -= sum(y is x for y in in_result)
        m -= sum(y._store is store and y is not x for y in in_result)
        if n > refs or m > store_refs:
            grown.append((x, n - refs, m - store_refs))
    return grown


def _keeps_argument(grown: list[tuple], plan: Plan, probe: Probe) -> bool:
    """Whether references an argument gained in the call (`_grown`) are more than the
    module attributes the plan sets again (Note [Module attributes the call sets]), the
    storage references the probe holds and the views only PyTorch holds (Note [Views
    kept by views])."""
    attributes = []
    for ref, table, name, effect in plan.attributes:
        m = ref()
        if m is not None:
            attributes.append((m._buffers if table else vars(m)).get(name))
    m = None
    for x, refs, store_refs in grown:
        store = x._store
        refs -= sum(a is x for a in attributes)
        # a live view holds its base in C++, which keeps one reference to the base's
        # Python object however many views there are
        refs -= any(v() is not None and v()._base is x for v in probe.views)
        store_refs -= sum(a is not x and a is not None and a._store is store for a in attributes)
        store_refs -= id(store) in probe.held
        if refs > 0 or store_refs > _kept_by_views(store, {id(x)}, probe.views):
            return True
    return False


def _result_containers(x: Any, out: list) -> list:
    """The containers of a returned pytree (tuples, lists, dicts, registered nodes such
    as transformers' ModelOutput), outermost first."""
    if not _pytree.tree_is_leaf(x):
        out.append(x)
        for child in _pytree.SUPPORTED_NODES[_pytree._get_node_type(x)].flatten_fn(x)[0]:
            _result_containers(child, out)
    return out


def _keeps_result(result: Any, plan: Plan) -> bool:
    """Whether a tensor a replay makes anew (a returned tensor the call made or viewed,
    an attribute or a .grad it set) is also held somewhere a replay does not update
    (Note [Results kept by the call])."""
    out_leaves = [result] if result.__class__ is XlaTensor else tree_flatten(result)[0]
    # id -> the tensor, and the references PyTorch holds to it (a .grad's slot: one)
    rebuilt = {id(x): (x, 0) for x, o in zip(out_leaves, plan.outputs) if o[0] in ("new", "view")}
    for ref, effect in plan.grad_effects:
        if effect is not None:
            x = ref().grad
            rebuilt[id(x)] = (x, 1)
    tables = []
    for ref, table, name, effect in plan.attributes:
        m = ref()
        if m is not None:
            tables.append(m._buffers if table else vars(m))
            if effect[0] in ("new", "view"):
                x = tables[-1][name]
                rebuilt.setdefault(id(x), (x, 0))
    if not rebuilt:
        return False
    containers = _result_containers(result, [])
    holders = containers + [vars(c) for c in containers if hasattr(c, "__dict__")] + tables
    counted = collections.Counter(id(r) for h in holders for r in gc.get_referents(h))
    m = x = out_leaves = None
    over = []
    for i, (x, pytorch_refs) in rebuilt.items():
        # beyond those: `rebuilt`'s tuple, `x`, getrefcount's argument, and for a result
        # that is the tensor, `result` here and in the caller
        if sys.getrefcount(x) - 3 - 2 * (x is result) - pytorch_refs - counted[i] > 0:
            over.append(x)
    x = None
    if not over:
        return False
    # One more can be PyTorch's while C++ shares the tensor (a live view's base, a tensor
    # saved for backward): only what refers to it from Python decides.
    allowed = {id(h) for h in holders} | {id(over)} | {id(entry) for entry in rebuilt.values()}
    f = sys._getframe()
    while f is not None:
        allowed.add(id(f))
        f = f.f_back
    return any(id(r) not in allowed for r in gc.get_referrers(*over))


def _fp_array(a: np.ndarray) -> tuple:
    return (a.shape, str(a.dtype), a.tobytes())


def _fp_cpu(t: torch.Tensor) -> tuple:
    """A contiguous CPU tensor's values, of any dtype."""
    return (tuple(t.shape), t.dtype, t.reshape(-1).view(torch.uint8).numpy().tobytes())


def _fp_source(src: tuple) -> tuple:
    kind, x = src
    if kind == OBJ:
        return (OBJ, id(x()))
    if kind == CONST:
        return (CONST,) + _fp_array(np.asarray(x))
    return src


def _fp_value(x: Any) -> Any:
    if isinstance(x, _SIMPLE):
        return (type(x), repr(x))  # repr: NaN equals itself
    return ("id", id(x))


def grad_holders(probe: Probe, leaves: list) -> dict[int, XlaTensor]:
    """Leaf tensors requiring grad that the call read or wrote, and the parameters of the
    optimizers it stepped: the call may set their .grad."""
    known = {}
    for x in leaves:
        if x.__class__ is XlaTensor and x.requires_grad and x.is_leaf:
            known[id(x)] = x
    touched = [ref() for ref in probe.owners.values()]
    touched += [p for o in probe.optimizers.values() for g in o.param_groups for p in g["params"]]
    for t in touched:
        if t.__class__ is XlaTensor and t.requires_grad and t.is_leaf:
            known[id(t)] = t
    return known


class Segment:
    """One graph of a replayed call: a host read (.item(), a data-dependent shape) ends a
    segment, and the value it read becomes a guard checked before the next one runs."""

    __slots__ = ("fn", "key", "sources", "shapes", "scalars", "reads", "input_reads")


def _segment_source(v: Any, probe: Probe, arg_stores: dict[int, int], orphans: set[int]) -> tuple | str:
    seg = probe.input_seg.get(id(v))
    if seg is not None:
        return (SEG, seg)
    sid = probe.input_store.get(id(v))
    src = (CONST, None) if sid is None else _source_of(sid, probe, arg_stores, orphans)
    if not isinstance(src, str) and src[0] == CONST:
        src = (CONST, v.data)
    return src


def build_plan(probe: Probe, leaves: list, result: Any, known: dict[int, XlaTensor], pre_grads: dict[int, tuple],
               grad_enabled: bool, inference_mode: bool = False) -> Plan | str:
    """The replay plan of a traced call, or why it cannot be replayed. `known`: the
    call's grad_holders, `pre_grads`: their .grad before the call."""
    if probe.failure is not None:
        return probe.failure
    arg_stores: dict[int, int] = {}
    for i, x in enumerate(leaves):
        if x.__class__ is XlaTensor:
            arg_stores.setdefault(id(x._store), i)
    orphans = _orphans(probe, arg_stores)
    plan = Plan()
    plan.grad_enabled = grad_enabled
    plan.inference_mode = inference_mode
    plan.segments = []
    writebacks: dict[int, tuple] = {}  # storage id -> ((segment, root), source)
    new_roots: dict[int, tuple] = {}  # storage id -> (segment, root)
    alive: dict[int, Storage] = {}
    for j, (pending, inputs, scalars, key, fn) in enumerate(probe.graphs):
        seg = Segment()
        seg.fn, seg.key = fn, key
        seg.sources, seg.shapes, seg.reads, seg.input_reads = [], [], [], []
        for v in inputs:
            src = _segment_source(v, probe, arg_stores, orphans)
            if isinstance(src, str):
                return src
            seg.sources.append(src)
            seg.shapes.append((tuple(v.data.shape), v.data.dtype))
        seg.scalars = [sc.value for sc in scalars]
        for k, ref in enumerate(pending):
            s = ref()
            if s is None:
                continue
            sid = id(s)
            if sid in probe.owners or sid in arg_stores:
                src = _source_of(sid, probe, arg_stores, orphans)
                if isinstance(src, str):
                    return src
                if src[0] is ARG or src[0] is OBJ:
                    writebacks[sid] = ((j, k), src)
            else:
                new_roots[sid] = (j, k)
                alive[sid] = s
        s = None
        plan.segments.append(seg)
    plan.late_reads = []  # inputs read on the host after the last graph
    for kind, j, x, expected in probe.reads:
        if kind == "root":
            plan.segments[j].reads.append((x, expected))
            continue
        src = _segment_source(x, probe, arg_stores, orphans)
        if isinstance(src, str):
            return src
        (plan.segments[j].input_reads if j < len(plan.segments) else plan.late_reads).append((src, expected))
    plan.writebacks = list(writebacks.values())

    accounted: dict[int, set[int]] = {}
    out_leaves, out_spec = ([result], None) if result.__class__ is XlaTensor else tree_flatten(result)
    plan.out_spec = out_spec
    plan.outputs = []
    leaf_pos = {id(x): i for i, x in enumerate(leaves)}
    out_pos: dict[int, int] = {}
    returns_grad_fn = False
    for j, x in enumerate(out_leaves):
        if not isinstance(x, torch.Tensor):
            plan.outputs.append(("py", x))
            continue
        if x.__class__ is not XlaTensor:
            return "it returns a tensor that is not on our device"
        if id(x) in out_pos:
            plan.outputs.append(("dup", out_pos[id(x)]))
            continue
        out_pos[id(x)] = j
        if id(x) in leaf_pos:
            plan.outputs.append((ARG, leaf_pos[id(x)]))
            continue
        returns_grad_fn = returns_grad_fn or x.requires_grad
        sid = id(x._store)
        if sid in new_roots:
            _account(accounted, sid, x)
            # its kind: a call that enters inference_mode itself returns inference tensors
            plan.outputs.append(("new", new_roots[sid], _layout(x), x.is_inference()))
        elif sid in probe.owners or sid in arg_stores:
            src = _source_of(sid, probe, arg_stores, orphans)
            if isinstance(src, str) or src[0] not in (ARG, OBJ):
                return "it returns a view of a temporary tensor made on the host"
            same = src[0] == OBJ and src[1]() is x
            plan.outputs.append(("same", src) if same else ("view", src, _layout(x)))
        else:
            plan.outputs.append(("fixed", x))

    # Version counters: each tensor the call wrote in place, and each new result it
    # wrote after making it, advance by as much as in the trace (PyTorch bumps one per
    # in-place op); a replay writes storages without running those ops.
    plan.bumps = []
    for _, src in plan.writebacks:
        t = leaves[src[1]] if src[0] is ARG else src[1]()
        before, now = probe.versions.get(id(t)), version_of(t)
        if before is not None and now is not None and now > before:
            plan.bumps.append((src, now - before))
    for j, x in enumerate(out_leaves):
        if plan.outputs[j][0] == "new":
            now = version_of(x)
            if now:
                plan.bumps.append((("out", j), now))

    # .grad: the state of each tensor that may hold one, before the call and after
    plan.complete = all(i in pre_grads for i in known)
    plan.grad_guards, plan.grad_effects = [], []
    for i, t in known.items():
        before = pre_grads.get(i, (None, "unknown"))[1]
        after = t.grad
        ref = weakref.ref(t)
        if before is None or isinstance(before, str):
            guard = before
        elif id(before._store) in probe.owners:  # read or written in the call
            guard = ("is", weakref.ref(before))
        else:
            guard = "tensor"
        plan.grad_guards.append((ref, guard))
        if after is None:
            if before is not None:
                plan.grad_effects.append((ref, None))
        elif after is not before:
            sid = id(after._store) if after.__class__ is XlaTensor else None
            if sid not in new_roots:
                return "it sets a .grad to a tensor that is not one of its results"
            _account(accounted, sid, after)
            plan.grad_effects.append((ref, (new_roots[sid], _layout(after))))

    # Note [Module attributes the call sets]
    plan.attributes = []
    for ref, _, _ in probe.modules:
        m = ref()
        if m is None:
            continue
        for table, name, x in [(False, k, v) for k, v in vars(m).items()] + [(True, k, v) for k, v in
                                                                             m._buffers.items()]:
            if x.__class__ is not XlaTensor:
                continue
            sid = id(x._store)
            if id(x) in out_pos:
                effect = ("dup", out_pos[id(x)])
            elif id(x) in leaf_pos:
                effect = (ARG, leaf_pos[id(x)])
            elif sid in new_roots:
                _account(accounted, sid, x)
                returns_grad_fn = returns_grad_fn or x.requires_grad
                effect = ("new", new_roots[sid], _layout(x), x.is_inference())
            elif sid in arg_stores:
                effect = ("view", (ARG, arg_stores[sid]), _layout(x))
            else:
                continue  # a tensor that outlives calls (a parameter, a buffer written in place)
            plan.attributes.append((ref, table, name, effect))
    m = x = None

    # A replay builds no autograd graph. A result that requires grad (the loss) is still
    # fine when the call ran backward itself, and it comes back detached.
    if returns_grad_fn and not (plan.grad_effects or any(isinstance(g, tuple) for _, g in plan.grad_guards)):
        return ("it returns (or stores in a module attribute) a tensor that requires grad without running "
                "backward itself, and a replay builds no autograd graph (return .detach(), or run under "
                "torch.no_grad())")

    # Tensors the call made must be held only by what a replay rebuilds.
    after = x = None  # drop this frame's references before counting
    if _escaped(alive, accounted, probe.views):
        return ("it keeps a tensor it made outside its return value and .grad (a module attribute, "
                "a list, new optimizer state, or the autograd graph of a tensor it returns after backward(), "
                "which returning it detached drops), which a replay would not update")
    alive.clear()

    # Tensors read through OBJ sources must still hold the traced storages, and argument
    # storages must not be among them (the signature guards aliasing between arguments).
    objects = {}
    read = [src for seg in plan.segments for src in seg.sources + [r[0] for r in seg.input_reads]]
    for src in read + [r[0] for r in plan.late_reads] + [src for _, src in plan.writebacks] + \
            [o[1] for o in plan.outputs if o[0] in ("same", "view")]:
        if src[0] is OBJ:
            t = src[1]()
            objects[id(t)] = (src[1], weakref.ref(t._store))
    plan.objects = list(objects.values())
    plan.requires_grad = tuple(ref().requires_grad for ref, _ in plan.objects)
    plan.object_stores = frozenset(id(store_ref()) for _, store_ref in plan.objects)
    plan.args = sorted({i for i, x in enumerate(leaves) if x.__class__ is XlaTensor})
    plan.whole_args = frozenset(i for i in plan.args if leaves[i]._whole)
    t = None
    plan.optimizers = [(weakref.ref(o), _hyperparameters(o)) for o in probe.optimizers.values()]
    # Note [Modules made by the call]
    plan.modules, module_keys = [], []
    for ref, cls, training in probe.modules:
        m = ref()
        if m is None:
            module_keys.append((cls, training))
        else:
            plan.modules.append((ref, m.training))
            module_keys.append((id(m), m.training))
    m = None
    plan.cpu_constants = list(probe.cpu_constants.values())  # Note [CPU constants]
    plan.fingerprint = (
        tuple((seg.key, tuple(_fp_source(src) for src in seg.sources), tuple(_fp_value(v) for v in seg.scalars),
               tuple((k, _fp_array(e)) for k, e in seg.reads),
               tuple((_fp_source(src), _fp_array(e)) for src, e in seg.input_reads)) for seg in plan.segments),
        tuple((_fp_source(src), _fp_array(e)) for src, e in plan.late_reads),
        tuple((k, _fp_source(src)) for k, src in plan.writebacks),
        tuple(o if o[0] in ("new", "dup", ARG) else
              (o[0], _fp_source(o[1])) + o[2:] if o[0] in ("same", "view") else
              (o[0], _fp_value(o[1])) for o in plan.outputs),
        out_spec,
        tuple((id(r()), g if not isinstance(g, tuple) else id(g[1]())) for r, g in plan.grad_guards),
        tuple((id(r()), e) for r, e in plan.grad_effects),
        tuple((id(r()), h) for r, h in plan.optimizers),
        tuple(module_keys),
        grad_enabled,
        inference_mode,
        tuple((_fp_source(src) if src[0] != "out" else src, n) for src, n in plan.bumps),
        plan.requires_grad,
        tuple((id(r()), _fp_cpu(kept)) for r, kept in plan.cpu_constants),
        tuple((id(r()), table, name, effect) for r, table, name, effect in plan.attributes),
    )
    for seg in plan.segments:
        seg.scalars = [scalar_operand(v) for v in seg.scalars]
    return plan


_GUARD_FAILED = object()

# Note [Modules rebound between calls]: rebindings so far (a list, so that generated
# replays read it live), and id -> weakref of the modules and tensors plans read.
_REBINDINGS = [0]
_WATCHED: dict[int, weakref.ref] = {}
_rebinding_hooks: list = []


def _watch_rebindings() -> None:
    """Count assignments that replace a watched module, parameter or buffer."""
    if _rebinding_hooks:
        return

    def hook_on(table: str) -> Callable:
        def on_registration(module: torch.nn.Module, name: str, value: Any) -> None:
            if torch.compiler.is_compiling():
                # The hooks are global, so Dynamo traces them where code it compiles
                # assigns to a module, and fails on a half-built one (the torch.compile
                # wrapper compiled autograd makes, with any backend). Without looking at
                # the module, the assignment counts as a rebinding: at worst, one traced
                # call for each plan.
                _REBINDINGS[0] += 1
                return
            old = module.__dict__.get(table, {}).get(name)
            if old is not None and old is not value:
                ref = _WATCHED.get(id(old))
                if ref is not None and ref() is old:
                    _REBINDINGS[0] += 1
        return on_registration

    module_hooks = torch.nn.modules.module
    _rebinding_hooks.extend([
        module_hooks.register_module_parameter_registration_hook(hook_on("_parameters")),
        module_hooks.register_module_buffer_registration_hook(hook_on("_buffers")),
        module_hooks.register_module_module_registration_hook(hook_on("_modules")),
    ])


def _watch(x: Any) -> None:
    if x is not None:
        _WATCHED[id(x)] = weakref.ref(x, lambda _, i=id(x): _WATCHED.pop(i, None))


def _owned(tensors: tuple) -> bool:
    """Whether a trace (of another thread) holds one of these tensors' storages."""
    return any(t._store.owner is not None for t in tensors)


def _same_value(a: Any, expected: np.ndarray) -> bool:
    a = np.asarray(a)
    return (
        a.shape == expected.shape
        and a.dtype == expected.dtype
        and np.array_equal(a, expected, equal_nan=a.dtype.kind in "fc")
    )


def generate_replay(plan: Plan) -> Callable[[Any], Any]:
    """The plan as one straight-line Python function of the call's flattened arguments:
    every guard, input, write-back and output spelled out, since looping over the plan's
    lists costs more than the executable call on small models. It returns _GUARD_FAILED,
    before any effect on tensors, when a guard does not hold."""
    env: dict[str, Any] = {
        "FAILED": _GUARD_FAILED, "grad_enabled": torch.is_grad_enabled, "hyper": _hyperparameters, "X64": X64,
        "key_array": key_array, "copy": copy_array, "same": _same_value, "metrics": metrics, "perf": time.perf_counter,
        "Storage": storage_of, "tensor_on": tensor_on, "reinterpreting_view_on": reinterpreting_view_on,
        "unflatten": tree_unflatten,
        "write_lock": WRITE_LOCK, "active_traces": active_traces, "owned": _owned,
        "made_like": made_like, "made_in_mode": made_in_mode, "inference_mode": torch.is_inference_mode_enabled,
        "bump": torch._C._increment_version, "torch_equal": torch.equal,
    }
    lines: list[str] = []

    def const(value: Any) -> str:
        name = f"c{len(env)}"
        env[name] = value
        return name

    def emit(text: str, indent: int = 1) -> None:
        lines.append("    " * indent + text)

    # Note [Modules rebound between calls]
    _watch_rebindings()
    for ref, _ in plan.modules:
        _watch(ref())
    for ref, _ in plan.objects:
        _watch(ref())
    env["rebindings"] = _REBINDINGS
    emit(f"if rebindings[0] != {_REBINDINGS[0]}: return FAILED")
    emit(f"if grad_enabled() is not {plan.grad_enabled} or inference_mode() is not {plan.inference_mode}:")
    emit("return FAILED", 2)
    for ref, hyper in plan.optimizers:
        emit(f"o = {const(ref)}()")
        emit(f"if o is None or hyper(o) != {const(hyper)}: return FAILED")
    if plan.modules:  # one comparison for all: a module that died reads as None
        modes = ", ".join(f"getattr({const(ref)}(), 'training', None)" for ref, _ in plan.modules)
        emit(f"if ({modes},) != {const(tuple(training for _, training in plan.modules))}: return FAILED")
    for ref, kept in plan.cpu_constants:  # Note [CPU constants]
        emit(f"t = {const(ref)}()")
        emit(f"if t is None or not torch_equal(t, {const(kept)}): return FAILED")
    for ref, guard in plan.grad_guards:
        emit(f"t = {const(ref)}()")
        if guard is None:
            emit("if t is None or t.grad is not None: return FAILED")
        elif guard == "tensor":
            emit("if t is None or t.grad is None: return FAILED")
        else:
            emit(f"if t is None or t.grad is None or t.grad is not {const(guard[1])}(): return FAILED")
    objects: dict[int, str] = {}  # id(weakref) -> the local holding its tensor
    for i, (ref, store_ref) in enumerate(plan.objects):
        objects[id(ref)] = f"o{i}"
        emit(f"o{i} = {const(ref)}()")
        emit(f"if o{i} is None or o{i}._store is not {const(store_ref)}(): return FAILED")
    read = {id(ref()): f"o{i}" for i, (ref, _) in enumerate(plan.objects)}
    for ref, _ in plan.modules:  # plain tensor attributes: no hook sees them rebound
        for name, x in vars(ref()).items():  # (alive: the `training` guard above)
            if id(x) in read and x.__class__ is XlaTensor:
                emit(f"if {const(ref)}().__dict__.get({name!r}) is not {read[id(x)]}: return FAILED")
    if plan.object_stores:
        stores = const(plan.object_stores)
        for i in plan.args:  # an argument that is now one of the tensors the call reads itself
            emit(f"if id(leaves[{i}]._store) in {stores}: return FAILED")
    if plan.grad_enabled and plan.objects:
        # autograd records only through tensors that require grad: a parameter frozen
        # (or unfrozen) since the trace would get no gradient (or one), so no update
        flags = ", ".join(f"o{i}.requires_grad" for i in range(len(plan.objects)))
        emit(f"if ({flags},) != {const(plan.requires_grad)}: return FAILED")
    used = [f"o{i}" for i in range(len(plan.objects))] + [f"leaves[{i}]" for i in plan.args]
    if used:  # a tensor another thread's trace holds: the call is traced (Note [Reads of another thread's storages])
        emit(f"if active_traces and owned(({', '.join(used)},)): return FAILED")

    def tensor(src: tuple) -> str:
        return f"leaves[{src[1]}]" if src[0] is ARG else objects[id(src[1])]

    def array(src: tuple) -> str:
        kind, x = src
        if kind is ARG or kind is OBJ:
            return f"{tensor(src)}._store.array"
        if kind is SEG:
            return f"r{x[0]}[{x[1]}]"
        return "key_array()" if kind is KEY else const(x)

    def on(store: str, spec: tuple, like: str | None = None, inference: bool | None = None) -> str:
        """A tensor on `store` with a _layout; a view of its storage's memory as another
        dtype keeps its flag (Note [Views and mutation]); `like`: a tensor whose kind it takes,
        `inference`: the kind it has (Note [Inference mode] in core/inference.py), when
        not that of the mode the replay runs in, which its guard fixes."""
        shape, dtype, view, reinterprets = spec
        make = 'reinterpreting_view_on' if reinterprets else 'tensor_on'
        if like is not None:
            return f"made_like({like}, {make}, {store}, {shape!r}, {const(dtype)}, {view!r})"
        if inference is not None and inference is not plan.inference_mode:
            return f"made_in_mode({inference}, {make}, {store}, {shape!r}, {const(dtype)}, {view!r})"
        return f"{make}({store}, {shape!r}, {const(dtype)}, {view!r})"

    for j, seg in enumerate(plan.segments):
        for src, expected in seg.input_reads:
            emit(f"if not same({array(src)}, {const(expected)}): return FAILED")
        names = []
        for k, (src, (shape, dtype)) in enumerate(zip(seg.sources, seg.shapes)):
            names.append(f"a{j}_{k}")
            emit(f"a{j}_{k} = {array(src)}")
            # An OBJ's storage is guarded and a storage's array keeps its aval; a whole
            # argument's array has the shape and dtype its signature key holds.
            if src[0] is ARG and src[1] not in plan.whole_args:
                emit(f"if a{j}_{k}.shape != {shape!r} or a{j}_{k}.dtype != {const(dtype)}: return FAILED")
        # Note [Donated graph inputs]: a buffer is handed over only from a storage this
        # graph writes back, and only where no guard can fail after it ran.
        written = {src for (jj, _), src in plan.writebacks if jj == j}
        final = len(plan.segments) == 1 and not seg.reads and not plan.late_reads
        donated = getattr(seg.fn, "donated", ())
        copied = [k for k in donated if not (final and seg.sources[k] in written)]
        taken = [k for k in donated if k not in copied]
        for k in copied:
            emit(f"a{j}_{k} = copy(a{j}_{k})")
        emit(f"args = [{', '.join(names)}]")
        if copied:
            emit(" = ".join(f"a{j}_{k}" for k in copied) + " = None")  # the list holds them alone
        # Note [Threads and storages]: a buffer to donate leaves its storage first, so no
        # other thread can pick it up; one that holds it shows in the executable's count.
        for k in taken:
            emit(f"{tensor(seg.sources[k])}._store.array = None")
        emit("start = perf()")
        if taken:
            emit("try:")
            emit("with X64:", 2)
            emit(f"r{j} = {const(seg.fn)}(args, {const(seg.scalars)})", 3)
            emit("except BaseException:")
            for k in taken:
                emit(f"{tensor(seg.sources[k])}._store.array = a{j}_{k}", 2)
            emit("raise", 2)
            emit(" = ".join(f"a{j}_{k}" for k in taken) + " = None")
        else:
            emit("with X64:")
            emit(f"r{j} = {const(seg.fn)}(args, {const(seg.scalars)})", 2)
        emit("metrics.execute_seconds += perf() - start")
        for k, expected in seg.reads:
            emit(f"if not same(r{j}[{k}], {const(expected)}): return FAILED")
    for src, expected in plan.late_reads:
        emit(f"if not same({array(src)}, {const(expected)}): return FAILED")
    emit(f"metrics.execute_count += {len(plan.segments)}")
    emit(f"metrics.cache_hits += {len(plan.segments)}")
    emit("metrics.replays += 1")
    # Note [Counting replayed ops] in platform/metrics.py: the ops of the traced call
    emit(f"{const(ReplayedOps(plan.op_counts))}.runs += 1")
    for (j, k), src in plan.writebacks:
        emit(f"s = {tensor(src)}._store")
        emit(f"s.array = r{j}[{k}]")
        emit("s.version += 1")
    made: dict[tuple, str] = {}

    def new_store(at: tuple) -> str:
        if at not in made:
            made[at] = f"n{at[0]}_{at[1]}"
            emit(f"{made[at]} = Storage(r{at[0]}[{at[1]}])")
        return made[at]

    for ref, effect in plan.grad_effects:
        value = "None" if effect is None else on(new_store(effect[0]), effect[1])
        emit(f"{const(ref)}().grad = {value}")
    for i, o in enumerate(plan.outputs):
        kind = o[0]
        if kind == "new":
            value = on(new_store(o[1]), o[2], inference=o[3])
        elif kind is ARG:
            value = f"leaves[{o[1]}]"
        elif kind == "same":
            value = tensor(o[1])
        elif kind == "view":  # of an argument: a normal tensor if that is one (Note [Inference mode])
            value = on(f"{tensor(o[1])}._store", o[2], like=tensor(o[1]))
        elif kind == "dup":
            value = f"out{o[1]}"
        else:  # "py", "fixed"
            value = const(o[1])
        emit(f"out{i} = {value}")
    for ref, table, name, effect in plan.attributes:  # Note [Module attributes the call sets]
        kind = effect[0]
        if kind == "dup":
            value = f"out{effect[1]}"
        elif kind is ARG:
            value = f"leaves[{effect[1]}]"
        elif kind == "new":
            value = on(new_store(effect[1]), effect[2], inference=effect[3])
        else:  # a view of an argument
            value = on(f"{tensor(effect[1])}._store", effect[2], like=tensor(effect[1]))
        emit(f"{const(ref)}().{'_buffers' if table else '__dict__'}[{name!r}] = {value}")
    if plan.bumps:
        bumped = [tensor(src) if src[0] != "out" else f"out{src[1]}" for src, n in plan.bumps for _ in range(n)]
        emit(f"bump(({', '.join(bumped)},))")
    if plan.out_spec is None:
        emit("return out0")
    else:
        emit(f"return unflatten([{', '.join(f'out{i}' for i in range(len(plan.outputs)))}], {const(plan.out_spec)})")
    # The replay reads and writes back storages as one write (Note [Threads and storages]).
    body = "\n".join("    " + line for line in lines)
    exec(f"def replay(leaves):\n    with write_lock:\n{body}\n", env)
    return env["replay"]


def signature(args: tuple, kwargs: dict) -> tuple[Any, list] | None:
    """The cache key of a call (structure, tensor metadata, aliasing, Python values) and
    its flattened arguments; None when an argument cannot be guarded (a CPU tensor). A
    tensor spanning its whole storage is keyed without its strides and offset, which
    that implies, and with a different tuple length from any other view."""
    if kwargs or any(a.__class__ in _CONTAINERS for a in args):
        leaves = []
        spec = _structure((args, kwargs), leaves)
        if spec is _OTHER:  # a named tuple, an OrderedDict, a registered pytree class
            leaves, spec = tree_flatten((args, kwargs))
    else:
        leaves, spec = args, len(args)
    key: list[Any] = [spec]
    stores: dict[int, int] = {}
    for x in leaves:
        cls = x.__class__
        if cls is XlaTensor:
            # is_inference: an inference tensor is refused where a normal one is not
            # (saved for backward, written outside inference mode: Note [Inference mode])
            if x._whole:
                key.append((x.shape, x.dtype, x.requires_grad, x.is_inference(),
                            stores.setdefault(id(x._store), len(stores))))
            else:
                key.append((x.shape, x.stride(), x.storage_offset(), x.dtype, x.requires_grad, x.is_inference(),
                            stores.setdefault(id(x._store), len(stores))))
        elif cls in _SIMPLE:
            key.append((cls, x))
        elif isinstance(x, torch.Tensor):
            return None
        else:
            key.append(("id", id(x)))
    return tuple(key), leaves


_CONTAINERS = (list, tuple, dict)
_LEAF, _OTHER = "leaf", "other"


def _structure(x: Any, leaves: list) -> Any:
    """The nesting of plain tuples, lists and dicts in `x`, whose other values are
    appended to `leaves` (torch's tree_flatten costs about 2 us per node, this a tenth of
    that), or _OTHER if `x` holds another container type."""
    cls = x.__class__
    if cls is tuple or cls is list or cls is dict:
        inner = []
        for e in (x.values() if cls is dict else x):
            c = e.__class__
            if c is tuple or c is list or c is dict:
                e = _structure(e, leaves)
                if e is _OTHER:
                    return _OTHER
                inner.append(e)
            elif c is XlaTensor or not isinstance(e, _CONTAINERS):
                leaves.append(e)
                inner.append(_LEAF)
            else:
                return _OTHER
        return (cls, tuple(x), tuple(inner)) if cls is dict else (cls, tuple(inner))
    if isinstance(x, _CONTAINERS):
        return _OTHER
    leaves.append(x)
    return _LEAF


class _Signature:
    """What compile() knows about one call signature."""

    __slots__ = ("plans", "candidate", "probes", "known", "holds", "changed", "unprobed", "probe_interval",
                 "keeps_arguments")

    def __init__(self, leaves):
        self.plans: list[Plan] = []  # one per path (Note [Paths of a call]), the last replayed first
        self.candidate: Plan | None = None  # the previous trace's
        self.probes = 0
        self.unprobed = 0  # calls traced without probing since the last probe
        self.probe_interval = PROBE_AGAIN_AFTER
        self.known: list = []
        self.changed: str | None = None  # what differed between the last two plans, in words
        # a probe saw the call keep an argument (Note [Arguments kept by the call])
        self.keeps_arguments = False
        # non-tensor arguments are keyed by id: hold them so the id is not reused
        self.holds = [x for x in leaves if not isinstance(x, (torch.Tensor, *_SIMPLE))]


# What each part of a plan's fingerprint is, for the note of a call whose plan keeps changing.
_HOST_READS = "the values it reads on the host"
_FINGERPRINT_PARTS = (
    None, _HOST_READS, "which tensors it writes", "what it returns", "the structure it returns",
    "the .grad of the tensors it reads", "the .grad it sets", "the hyperparameters of the optimizers it steps",
    "the modules it calls (a module made in the call with a different class or training flag)", "grad mode",
    "inference mode", "the version counters it bumps", "which of the tensors it reads require grad",
    "the CPU tensors it reads (or their values: written between calls)",
    "the tensors it stores in module attributes",
)
_SEGMENT_PARTS = (
    "the graph it records", "where its graph inputs come from (a tensor made in the call from Python values "
    "holds different values each call, or a different tensor is read)", "the Python numbers its ops receive",
    _HOST_READS, _HOST_READS,
)


# The note of a step whose optimizer's hyperparameters change every call.
_SCHEDULED_HYPERPARAMETERS = (
    "an optimizer's hyperparameters changed between consecutive calls (a learning-rate scheduler), and its "
    "step reads them as Python numbers, which a replay holds fixed: give Adam or AdamW a tensor learning rate "
    "on our device, AdamW(params, lr=torch.tensor(1e-3, device='jax'), capturable=True), which the scheduler "
    "updates in place, and call scheduler.step() outside the compiled step (SGD reads a tensor learning rate "
    "with .item(), and stays traced)")


def _hyper_changed(before: Plan, after: Plan) -> bool:
    """Whether an optimizer both plans stepped has other hyperparameters in the second."""
    hypers = {id(ref()): hyper for ref, hyper in before.optimizers}
    return any(id(ref()) in hypers and hypers[id(ref())][0] != hyper[0] for ref, hyper in after.optimizers)


def _what_changed(before: tuple, after: tuple) -> str | None:
    """Which part of two consecutive fingerprints (build_plan's, one entry of
    _FINGERPRINT_PARTS per part) differs, in words."""
    for k, (a, b) in enumerate(zip(before, after)):
        if a == b:
            continue
        if k:
            return _FINGERPRINT_PARTS[k]
        if len(a) != len(b):
            return "the number of graphs (values read on the host split it differently)"
        for sa, sb in zip(a, b):
            for part, (pa, pb) in zip(_SEGMENT_PARTS, zip(sa, sb)):
                if pa != pb:
                    return part
    return None


def _probe(fn: Callable, args: tuple, kwargs: dict, leaves: list, entry: _Signature) -> Any:
    probe = Probe()
    pre_grads = {}
    for ref in entry.known:
        t = ref()
        if t is not None:
            pre_grads[id(t)] = (t, t.grad)

    # The hooks are global: only this thread's optimizers and modules belong to the call.
    thread = threading.get_ident()

    def on_step(opt, a, k):
        if threading.get_ident() == thread:
            probe.optimizers.setdefault(id(opt), opt)

    def on_forward(module, a):
        if threading.get_ident() == thread:
            ref = probe.module_refs.get(id(module))
            if ref is None or ref() is not module:
                ref = probe.module_refs[id(module)] = weakref.ref(module)
                probe.modules.append((ref, module.__class__, module.training))
            for table in (vars(module), module._buffers, module._parameters):
                for x in table.values():
                    if isinstance(x, XlaTensor):
                        probe.module_state.add(id(x._store))

    hooks = [register_optimizer_step_pre_hook(on_step),
             torch.nn.modules.module.register_module_forward_pre_hook(on_forward)]
    grad_enabled = torch.is_grad_enabled()
    inference_mode = torch.is_inference_mode_enabled()
    for x in leaves:
        if x.__class__ is XlaTensor:
            probe.versions[id(x)] = version_of(x)
    calls = metrics.calls_by_id
    calls_before = dict(calls)
    before = _argument_references(leaves)
    try:
        with tracing(observer=probe):
            with _HostOpWatch(probe):
                result = fn(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    grown = _grown(before, _reference_counts(before[0]), result)
    before = None
    leaves = list(leaves)
    known = grad_holders(probe, leaves)
    plan = build_plan(probe, leaves, result, known, pre_grads, grad_enabled, inference_mode)
    if not isinstance(plan, str) and (entry.keeps_arguments or grown and _keeps_argument(grown, plan, probe)):
        entry.keeps_arguments = True
        plan = ("it keeps an argument, or a view of one, after the call (in a list, a dict or an object other "
                "than a module it calls), where a replay would leave the traced call's argument")
    grown = None
    if not isinstance(plan, str) and _keeps_result(result, plan):
        plan = ("it keeps a tensor it returns or sets (a module attribute, a .grad), or a view of one, also in "
                "a list, a dict or an object other than a module it calls, where a replay would leave the traced "
                "call's tensor")
    if not isinstance(plan, str):  # what a replay of this call counts (Note [Counting replayed ops])
        plan.op_counts = tuple((k, n - calls_before.get(k, 0)) for k, n in calls.items() if n > calls_before.get(k, 0))
    entry.known = [weakref.ref(t) for t in known.values()]
    del known
    del pre_grads
    probe = None  # the hooks' closures hold it
    entry.probes += 1
    if isinstance(plan, str):
        entry.candidate = None
        if entry.probes >= MAX_PROBES:
            _note(fn, plan)
    else:
        previous, entry.candidate = entry.candidate, plan
        if plan.complete and previous is not None and previous.fingerprint == plan.fingerprint:
            plan.run = generate_replay(plan)
            entry.plans.insert(0, plan)
            del entry.plans[MAX_PLANS:]
            entry.candidate, entry.probes = None, 0
        else:
            if previous is not None and plan.complete:
                part = _what_changed(previous.fingerprint, plan.fingerprint)
                entry.changed = (_SCHEDULED_HYPERPARAMETERS if _hyper_changed(previous, plan) else
                                 f"{part or 'what it records'} changed between consecutive calls")
                if part == _HOST_READS:
                    entry.changed += (" (a replay checks each value read inside the step against the traced one: "
                                      "return the tensor, a loss say, and call .item() after the call)")
            if entry.probes >= MAX_PROBES:
                _note(fn, entry.changed or "what it records changed between consecutive calls")
    return result


def _move_to_front(plans: list, plan: Plan) -> None:
    try:
        plans.remove(plan)
    except ValueError:  # another thread dropped it
        return
    plans.insert(0, plan)


class ReplayWarning(UserWarning):
    """A compile()d function will be traced on every call: correct, but each call runs
    its Python and records every op again, several times slower than a replay."""


def _note(fn: Callable, why: str, stacklevel: int = 4) -> None:
    """Record why `fn` is traced on every call, and warn at the user's call (stacklevel:
    from here through _probe and compiled)."""
    name = getattr(fn, "__qualname__", repr(fn))
    note = f"{name} is traced on every call: {why}"
    if note not in metrics.replay_notes:
        metrics.replay_notes.append(note)
        # Default AdamW takes a compiled step back to eager mode's time or worse (the small
        # zoo BERT's AdamW step: 22 to 32 ms; 1.7 ms with capturable=True), so say so.
        warnings.warn(f"compile(): {note}. Each call re-runs its Python and records every op; "
                      "metrics_report() lists the reasons", ReplayWarning, stacklevel=stacklevel)


def _foreign_argument(args: tuple, kwargs: dict) -> str:
    """Why `signature` refused a call: its first tensor argument not on our device."""
    leaves = tree_flatten((args, kwargs))[0]
    device = next((x.device for x in leaves if isinstance(x, torch.Tensor) and x.__class__ is not XlaTensor), "cpu")
    return (f"an argument is a tensor on {device}, whose ops run there, one by one: move it with "
            "xla_native_functions.to_xla(tensor), and the model with to_xla(model)")


def compile(fn: Callable, *, replay: bool = True) -> Callable:
    """Run `fn` (forward, backward, optimizer step, any torch code on XlaTensors) as one
    XLA program per call: its ops are traced, lowered together and cached by the graph's
    structure, so a steady loop compiles once. With `replay` (the default) a call whose
    trace is stable is then replayed without running its Python (Note [Replay] in
    frontends/replay.py); `replay=False` traces every call."""
    signatures: dict[Any, _Signature] = {}

    def traced(*args, **kwargs):
        with tracing():
            return fn(*args, **kwargs)

    if not replay:
        return functools.wraps(fn)(traced)

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        if context.trace is not None or config.debug_print_each_op or config.debug_accuracy_for_each_op:
            return traced(*args, **kwargs)
        sig = signature(args, kwargs)
        if sig is None:
            _note(fn, _foreign_argument(args, kwargs), stacklevel=3)
            return traced(*args, **kwargs)
        key, leaves = sig
        if torch.is_autocast_enabled(DEVICE.type):  # autocast entered around the call: its casts are traced
            key = (key, torch.get_autocast_dtype(DEVICE.type))
        default_dtype = torch.get_default_dtype()
        if default_dtype is not torch.float32:  # the dtype of the call's factories and Python floats is traced
            key = (key, default_dtype)
        entry = signatures.get(key)
        if entry is None:
            if len(signatures) >= MAX_SIGNATURES:
                _note(fn, f"it was called with more than {MAX_SIGNATURES} argument signatures", stacklevel=3)
                return traced(*args, **kwargs)
            entry = signatures[key] = _Signature(leaves)
        for k, plan in enumerate(tuple(entry.plans)):  # a copy: another thread may reorder them
            out = plan.run(leaves)
            if out is not _GUARD_FAILED:
                if k:  # the path taken last is tried first next time
                    _move_to_front(entry.plans, plan)
                return out
        if entry.probes >= MAX_PROBES:
            entry.unprobed += 1
            if entry.unprobed <= entry.probe_interval:
                return traced(*args, **kwargs)
            # Note [Probing again]: two more probes, which must agree with each other
            entry.unprobed, entry.candidate, entry.probes = 0, None, MAX_PROBES - 2
            entry.probe_interval = min(2 * entry.probe_interval, MAX_PROBE_INTERVAL)
        with compiles_held():
            return _probe(fn, args, kwargs, leaves, entry)

    compiled.signatures = signatures
    return compiled

