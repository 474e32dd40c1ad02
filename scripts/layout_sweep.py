"""Do our results have PyTorch CPU's strides when the inputs are dense but not contiguous?

For every OpInfo of PyTorch's op_db (float32), the samples of `op.sample_inputs` (with
--reference, then `op.reference_inputs`) are rebuilt in permuted layouts: every tensor
argument (the input, args, kwargs, tensors inside lists and tuples) of the variant's rank
keeps its shape and values but gets another dense memory layout:

- transposed (tensors of dim >= 2): `x.transpose(-1, -2).contiguous().transpose(-1, -2)`,
  the last two dims swapped in memory;
- channels_last (tensors of dim >= 3, others untouched): `x.movedim(1, -1).contiguous()
  .movedim(-1, 1)`, dim 1 innermost, as torch.channels_last lays out NCHW.

Per OpInfo and variant, the first --samples (4) samples whose layout the variant changes
are run, looked for among the first --scan (40); samples with no such tensor (1-d inputs,
a trailing size-1 dim) are passed over, and a variant with none at all is one `skipped`.

`op.op` runs on the permuted sample on PyTorch CPU and on our device. Each device input
is made from its memory-order copy, independently of how `to_xla` lays tensors out:
`to_xla` of the contiguous storage-order tensor, then the inverse view
(`xnf.to_xla(x.transpose(-1, -2).contiguous()).transpose(-1, -2)`); its
strides are checked against the CPU input's before the op runs. The rest of the sample
(dim < variant rank, device arguments, aliasing) is converted by tests/opinfo_harness.py's
`to_ours`, and the op runs under `xnf.default_env()`, as the OpInfo sweep does. PyTorch
CPU also runs the op on contiguous copies of the permuted inputs, to tell a layout it
carries through the op from one it always produces (LAPACK's column-major results).

Every output tensor (tuples and lists flattened) whose PyTorch result is non-overlapping
and dense with more than one element is compared: shape, and strides over the dims of size
> 1 (a size-1 dim's stride is arbitrary). Each (op, sample, variant) is then

- match: every compared output has PyTorch's shape and strides;
- stride_mismatch: some output differs (PyTorch's and our `shape:strides` are recorded,
  with PyTorch's layout kind: contiguous, follows the inputs, or non-contiguous on
  contiguous inputs too);
- error: our side raised (exception type and first line recorded);
- skipped: PyTorch CPU raised, no output to compare, no sample the layout changes, or the
  OpInfo is in tests/opinfo_skips.py's SKIPS.

    JAX_PLATFORMS=cpu python scripts/layout_sweep.py                      # every OpInfo, summary only
    JAX_PLATFORMS=cpu python scripts/layout_sweep.py --ops add relu clone softmax
    JAX_PLATFORMS=cpu python scripts/layout_sweep.py --out docs/reports/layouts.md

--ops takes OpInfo names (every variant of the name) or keys (`name.variant`); a name not in
op_db is looked up as `nn.functional.<name>` (relu). Each OpInfo has a time limit
(--time-limit, 60 s, signal.alarm); one that runs over is recorded as one error. New eager
signatures are answered by PyTorch's CPU kernel while they compile
(config.first_calls_on_cpu), which keeps shapes and strides those of the compiled path
(Note [First calls on PyTorch CPU]); --compile-first turns that off. The whole op_db takes
about a minute on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

STATUSES = ("match", "stride_mismatch", "error", "skipped")


@dataclass(frozen=True)
class Variant:
    name: str
    min_dim: int
    to_storage: Callable  # the view whose contiguous copy is the layout's memory order
    from_storage: Callable  # its inverse


VARIANTS = (
    Variant("transposed", 2, lambda t: t.transpose(-1, -2), lambda t: t.transpose(-1, -2)),
    Variant("channels_last", 3, lambda t: t.movedim(1, -1), lambda t: t.movedim(-1, 1)),
)


@dataclass
class Result:
    key: str  # OpInfo key
    name: str  # OpInfo name
    category: str
    sample: int
    variant: str
    status: str
    detail: str = ""  # skip reason, or the error's type and first line
    inputs: list[str] = field(default_factory=list)  # "shape:strides" of the permuted inputs
    # one per compared output: index, PyTorch's and our "shape:strides", match, PyTorch's
    # layout kind (LAYOUT_KINDS), a note
    outputs: list[dict] = field(default_factory=list)

    @property
    def compared(self) -> int:
        return len(self.outputs)

    @property
    def matched(self) -> int:
        return sum(o["match"] for o in self.outputs)

    @property
    def mismatches(self) -> list[dict]:
        return [o for o in self.outputs if not o["match"]]


# What PyTorch CPU did with an output's layout: contiguous; non-contiguous on the permuted
# inputs and contiguous on contiguous copies of them (it carried the inputs' layout through);
# non-contiguous on both (a layout of its own, e.g. LAPACK's column-major results); or
# non-contiguous with the contiguous run unavailable (it raised, or its outputs differ).
LAYOUT_KINDS = {
    "contiguous": "contiguous",
    "propagated": "follows the inputs",
    "fixed": "non-contiguous on contiguous inputs too",
    "non_contiguous": "non-contiguous (no run on contiguous inputs)",
}


class OpTimeout(BaseException):
    """Raised by the alarm; a BaseException so the per-sample handlers let it through."""


def _on_alarm(signum, frame):
    raise OpTimeout()


# ----------------------------------------------------------------- categories


_CONVERSIONS = {
    "clone", "contiguous", "to", "type_as", "double", "float", "half", "bfloat16", "int", "long", "short",
    "bool", "byte", "char", "cfloat", "cdouble", "chalf", "view_as", "detach", "positive", "resolve_conj",
    "resolve_neg", "conj", "conj_physical",
}
_FACTORIES = {"empty", "zeros", "ones", "full", "arange", "linspace", "logspace", "eye", "randn", "rand",
              "randint", "empty_permuted", "empty_strided", "scalar_tensor", "tril_indices", "triu_indices"}


def category(op) -> str:
    from torch.testing._internal.opinfo.core import BinaryUfuncInfo, ReductionOpInfo, UnaryUfuncInfo

    name = op.name
    if name in _CONVERSIONS:
        return "clone/to/conversion"
    if name.endswith("_like") or name.startswith("new_") or name in _FACTORIES:
        return "factory (*_like, new_*)"
    if name.startswith("nn.functional."):
        return "nn.functional"
    if isinstance(op, UnaryUfuncInfo):
        return "pointwise unary"
    if isinstance(op, BinaryUfuncInfo):
        return "pointwise binary"
    if isinstance(op, ReductionOpInfo):
        return "reduction"
    if name.startswith("linalg.") or name.startswith("fft."):
        return name.split(".")[0]
    return "other"


# ----------------------------------------------------------------- layouts


def _strides(x) -> tuple[int, ...]:
    """Strides over the dims of size > 1 (a size-1 dim's stride means nothing)."""
    return tuple(st for n, st in zip(x.shape, x.stride()) if n > 1)


def _dense(x) -> bool:
    """torch._prims_common's is_non_overlapping_and_dense (`..._or_false` in newer releases)."""
    import torch._prims_common as pc

    fn = getattr(pc, "is_non_overlapping_and_dense", None) or pc.is_non_overlapping_and_dense_or_false
    return bool(fn(x))


def _fmt(x) -> str:
    return f"{tuple(x.shape)}:{tuple(x.stride())}"


def _permuted(tree, variant: Variant):
    """(cpu tree, storage-order tree, indices of the permuted leaves): `cpu` holds the
    sample's tensors of dim >= variant.min_dim in the variant's layout, `storage` their
    contiguous memory-order copies (to move to our device and view back), other leaves as
    they are. The same tensor twice stays one tensor."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(tree)
    cpu, storage, permuted, made = list(leaves), list(leaves), [], {}
    for i, x in enumerate(leaves):
        if isinstance(x, torch.Tensor) and x.dim() >= variant.min_dim and x.layout == torch.strided:
            if id(x) not in made:
                base = variant.to_storage(x.detach()).contiguous()
                made[id(x)] = (variant.from_storage(base), base)
            cpu[i], storage[i] = made[id(x)]
            permuted.append(i)
    return tree_unflatten(cpu, spec), tree_unflatten(storage, spec), permuted


def _on_device(storage_tree, permuted: list[int], variant: Variant, op):
    """Our sample: the storage-order tree converted by the harness's to_ours, then the
    permuted leaves viewed back into the variant's layout (call under default_env)."""
    import opinfo_harness as h
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(h.to_ours(storage_tree, op))
    viewed = {}
    for i in permuted:
        x = leaves[i]
        if id(x) not in viewed:
            viewed[id(x)] = variant.from_storage(x)
        leaves[i] = viewed[id(x)]
    return tree_unflatten(leaves, spec)


def _first_line(e: BaseException) -> str:
    text = str(e).replace(str(ROOT) + os.sep, "").strip().splitlines()  # paths relative to the repository
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def _layout_kind(e, base) -> str:
    import torch

    if e.is_contiguous():
        return "contiguous"
    if not isinstance(base, torch.Tensor) or tuple(base.shape) != tuple(e.shape):
        return "non_contiguous"
    return "propagated" if base.is_contiguous() else "fixed"


def _compare_outputs(r: Result, expected, got, baseline) -> None:
    """`baseline`: PyTorch CPU's outputs on contiguous copies of the inputs, or None."""
    import torch

    exp, ours = _leaves(expected), _leaves(got)
    base = _leaves(baseline) if baseline is not None else []
    if len(base) != len(exp):
        base = [None] * len(exp)
    if len(exp) != len(ours):
        r.outputs.append({"output": "*", "match": False, "kind": "-", "pt": "-", "ours": "-",
                          "note": f"{len(ours)} outputs, PyTorch {len(exp)}"})
        return
    for i, (e, a, b) in enumerate(zip(exp, ours, base)):
        if not isinstance(e, torch.Tensor) or e.layout != torch.strided:
            continue
        if e.numel() <= 1 or not _dense(e):
            continue
        o = {"output": i, "pt": _fmt(e), "kind": _layout_kind(e, b), "note": ""}
        if not isinstance(a, torch.Tensor):
            o.update(ours="-", match=False, note=f"ours is a {type(a).__name__}")
        else:
            o.update(ours=_fmt(a), match=tuple(a.shape) == tuple(e.shape) and _strides(a) == _strides(e))
            if tuple(a.shape) != tuple(e.shape):
                o["note"] = "shape differs"
        r.outputs.append(o)


def _contiguous_copy(tree, permuted: list[int]):
    """`tree` with its permuted leaves made contiguous (the same tensor twice stays one)."""
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(tree)
    made = {}
    for i in permuted:
        x = leaves[i]
        if id(x) not in made:
            made[id(x)] = x.contiguous()
        leaves[i] = made[id(x)]
    return tree_unflatten(leaves, spec)


def run_sample(op, key: str, cat: str, index: int, s, variant: Variant) -> Result | None:
    import opinfo_harness as h
    import xla_native_functions as xnf

    cpu, storage, permuted = _permuted((s.input, tuple(s.args), dict(s.kwargs)), variant)
    cpu_leaves = _leaves(cpu)
    inputs = [cpu_leaves[i] for i in permuted]
    if all(x.is_contiguous() for x in inputs):
        return None  # no tensor argument of the variant's rank, or none whose layout changes
    r = Result(key, op.name, cat, index, variant.name, "skipped")
    r.inputs = list(dict.fromkeys(_fmt(x) for x in inputs))
    try:
        with xnf.default_env():
            ours = _on_device(storage, permuted, variant, op)
    except Exception as e:
        r.status, r.detail = "error", "moving the sample: " + _first_line(e)
        return r
    our_leaves = _leaves(ours)
    for i in permuted:
        if _strides(our_leaves[i]) != _strides(cpu_leaves[i]):
            r.status = "error"
            r.detail = f"InputLayout: device input {_fmt(our_leaves[i])}, CPU {_fmt(cpu_leaves[i])}"
            return r
    baseline_sample = _contiguous_copy(cpu, permuted)
    try:
        expected = h._call(op.op, cpu)
    except Exception:
        r.detail = "PyTorch CPU raised"
        return r
    try:
        baseline = h._call(op.op, baseline_sample)
    except Exception:
        baseline = None
    try:
        with xnf.default_env():
            got = h._call(op.op, ours)
    except Exception as e:
        r.status, r.detail = "error", _first_line(e)
        return r
    _compare_outputs(r, expected, got, baseline)
    if r.mismatches:
        r.status = "stride_mismatch"
    elif r.compared:
        r.status = "match"
    else:
        r.detail = "no non-overlapping and dense output with more than one element"
    return r


def _leaves(tree) -> list:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(tree)[0]


def _samples(op, reference: bool):
    import torch

    yield from op.sample_inputs("cpu", torch.float32)
    if reference and op.reference_inputs_func is not None:
        # most reference_inputs repeat sample_inputs' samples first (counted against --scan)
        yield from op.reference_inputs("cpu", torch.float32)


def run_op(op, key: str, samples: int, scan: int, time_limit: int, reference: bool = False) -> list[Result]:
    """Up to `samples` samples per variant, the first ones (of at most `scan`) whose layout
    the variant changes; a variant with none is one skipped result."""
    import torch

    cat = category(op)
    results: list[Result] = []
    taken = Counter()
    seen = 0
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(time_limit)
    try:
        torch.manual_seed(0)
        for index, s in enumerate(_samples(op, reference)):
            seen = index + 1
            for variant in VARIANTS:
                if taken[variant.name] < samples:
                    r = run_sample(op, key, cat, index, s, variant)
                    if r is not None:
                        taken[variant.name] += 1
                        results.append(r)
            if seen >= scan or all(taken[v.name] >= samples for v in VARIANTS):
                break
    except OpTimeout:
        results.append(Result(key, op.name, cat, seen, "*", "error", f"OpTimeout: over {time_limit} s"))
        return results
    except Exception as e:  # sample generation failed, or a bug here
        results.append(Result(key, op.name, cat, seen, "*", "error", "harness: " + _first_line(e)))
        return results
    finally:
        signal.alarm(0)
    for v in VARIANTS:
        if not taken[v.name]:
            why = f"no sample (of the first {scan}) has a tensor argument this layout makes non-contiguous"
            results.append(Result(key, op.name, cat, -1, v.name, "skipped", why))
    return results


# ----------------------------------------------------------------- reports


def summary_rows(results: list[Result]) -> list[list[str]]:
    rows = []
    for v in [v.name for v in VARIANTS] + ["total"]:
        rs = [r for r in results if v in ("total", r.variant)]
        counts = Counter(r.status for r in rs)
        compared = sum(r.compared for r in rs)
        matched = sum(r.matched for r in rs)
        pct = f"{100 * matched / compared:.1f}%" if compared else "-"
        rows.append([v, *(str(counts[s]) for s in STATUSES), str(compared), str(matched), pct])
    return rows


SUMMARY_HEADER = ["variant", *STATUSES, "outputs compared", "outputs matching", "match %"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(x):
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return lines


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [header, *rows])


def names_by_category(results: list[Result], kinds: tuple[str, ...], match: bool) -> dict[str, list[str]]:
    """OpInfo names with an output of one of PyTorch's layout `kinds` that we match (or
    not), by category."""
    out: dict[str, set[str]] = defaultdict(set)
    for r in results:
        if any(o["kind"] in kinds and o["match"] is match for o in r.outputs):
            out[r.category].add(r.name)
    return {c: sorted(names) for c, names in sorted(out.items())}


def _by_category(groups: dict[str, list[str]]) -> list[str]:
    return [f"- {c} ({len(n)}): {', '.join(f'`{x}`' for x in n)}" for c, n in groups.items()] or ["none"]


def report(results: list[Result], command: str) -> str:
    ops = len({r.key for r in results})
    lines = [
        f"Generated by `{command}` (see its `--help`); do not edit.",
        "",
        "# Output strides on permuted (dense, non-contiguous) inputs",
        "",
        f"{ops} OpInfos, float32. See the script's docstring for what is compared:",
        "for each output PyTorch CPU makes non-overlapping and dense with more than one element, the shape and the",
        "strides over dims of size > 1, ours against PyTorch's. Counts are (OpInfo, sample, variant) runs; the",
        "total also counts OpInfo-level rows (tests/opinfo_skips.py skips, time-outs, failed sample generation).",
        "",
        "## Summary",
        "",
        *_table(SUMMARY_HEADER, summary_rows(results)),
        "",
        "Each output's *PyTorch layout* says what PyTorch CPU did: `contiguous`; `follows the inputs`",
        "(non-contiguous here, contiguous when the same op runs on contiguous copies of the inputs);",
        "`non-contiguous on contiguous inputs too` (a layout of its own, e.g. LAPACK's column-major results).",
        "Lists name OpInfos (by name, variants merged) by category; an OpInfo can be in several.",
        "",
        "## Layouts PyTorch propagates and we do not",
        "",
        "A stride mismatch on an output whose layout follows the inputs in PyTorch:",
        "",
        *_by_category(names_by_category(results, ("propagated",), False)),
        "",
        "## Non-contiguous layouts of PyTorch's own that we do not produce",
        "",
        "A stride mismatch on an output PyTorch makes non-contiguous from contiguous inputs too (or whose",
        "run on contiguous inputs was not available):",
        "",
        *_by_category(names_by_category(results, ("fixed", "non_contiguous"), False)),
        "",
        "## Layouts we produce and PyTorch does not",
        "",
        "A stride mismatch on an output PyTorch makes contiguous:",
        "",
        *_by_category(names_by_category(results, ("contiguous",), False)),
        "",
        "## Layouts PyTorch propagates and we match",
        "",
        *_by_category(names_by_category(results, ("propagated",), True)),
    ]
    mism = [r for r in results if r.status == "stride_mismatch"]
    lines += ["", f"## Stride mismatches ({len(mism)} samples)", "",
              "Inputs (the permuted ones) and outputs are `shape:strides`.", ""]
    rows = []
    for r in mism:
        for m in r.mismatches:
            ours = m["ours"] + (f" ({m['note']})" if m["note"] else "")
            kind = LAYOUT_KINDS.get(m["kind"], m["kind"])
            rows.append([f"`{r.key}`", r.variant, r.sample, m["output"], "<br>".join(r.inputs), m["pt"], kind, ours])
    lines += _table(["op", "variant", "sample", "output", "inputs", "PyTorch", "PyTorch layout", "ours"], rows)
    errs = [r for r in results if r.status == "error"]
    lines += ["", f"## Errors ({len(errs)} samples)", ""]
    by_msg: dict[str, list[Result]] = defaultdict(list)
    for r in errs:
        by_msg[r.detail].append(r)
    rows = [[len(rs), m, ", ".join(f"`{k}`" for k in dict.fromkeys(r.key for r in rs))]
            for m, rs in sorted(by_msg.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    lines += _table(["samples", "message", "ops"], rows)
    skips: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.status == "skipped":
            skips[r.detail].append(r)
    rows = [[len(rs), d, ", ".join(f"`{k}`" for k in dict.fromkeys(r.key for r in rs))]
            for d, rs in sorted(skips.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    lines += ["", "## Skips", "", *_table(["samples", "reason", "ops"], rows), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------- main


def _parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", nargs="+", default=[], metavar="NAME", help="OpInfo names or keys (default: all)")
    p.add_argument("--limit", type=int, default=0, help="run only the first N OpInfos (after --ops)")
    p.add_argument("--samples", type=int, default=4, help="samples per OpInfo and variant (default 4)")
    p.add_argument("--scan", type=int, default=40, help="look for them among the first N samples (default 40)")
    p.add_argument("--reference", action="store_true",
                   help="also draw samples from op.reference_inputs (after sample_inputs), where it exists")
    p.add_argument("--time-limit", type=int, default=60, help="seconds per OpInfo (default 60)")
    p.add_argument("--out", default="", help="write the Markdown report here (e.g. docs/reports/layouts.md)")
    p.add_argument("--compile-first", action="store_true",
                   help="config.first_calls_on_cpu = False: compile every new signature before it runs")
    p.add_argument("-v", "--verbose", action="store_true", help="one progress line per OpInfo on stderr")
    return p.parse_args(argv)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse_args(argv)
    warnings.simplefilter("ignore")
    from codegen.repo_import import use_repo

    use_repo(ROOT)
    import opinfo_harness as h
    import xla_native_functions as xnf
    from opinfo_skips import skip_reason

    if args.compile_first:
        xnf.config.first_calls_on_cpu = False
    ops = h.opinfos()
    keys = list(ops)
    if args.ops:
        names = {ops[k].name for k in keys}
        wanted, unknown = set(), []
        for n in args.ops:
            # a bare nn.functional name (relu) means the nn.functional OpInfo
            found = [x for x in (n, "nn.functional." + n) if x in ops or x in names]
            if found:
                wanted.add(found[0])
            else:
                unknown.append(n)
        if unknown:
            sys.exit(f"unknown OpInfo names: {', '.join(unknown)}")
        keys = [k for k in keys if k in wanted or ops[k].name in wanted]
    if args.limit:
        keys = keys[: args.limit]
    results: list[Result] = []
    start = time.perf_counter()
    for n, key in enumerate(keys, 1):
        op = ops[key]
        reason = skip_reason(key, "float32", "eager")
        t0 = time.perf_counter()
        if reason:
            rs = [Result(key, op.name, category(op), 0, "*", "skipped", "opinfo_skips: " + reason)]
        else:
            rs = run_op(op, key, args.samples, args.scan, args.time_limit, args.reference)
        results += rs
        if args.verbose:
            c = Counter(r.status for r in rs)
            print(f"[{n}/{len(keys)}] {key}: " + " ".join(f"{s}={c[s]}" for s in STATUSES if c[s])
                  + f" ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    print(_text_table(SUMMARY_HEADER, summary_rows(results)))
    print(f"{len(keys)} OpInfos in {seconds:.0f} s")
    if args.out:
        command = "python scripts/layout_sweep.py" + (" " + shlex.join(argv) if argv else "")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report(results, command))
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
