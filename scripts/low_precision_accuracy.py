"""Where bfloat16/float16 results differ from PyTorch CPU, which is closer to the truth?

For every OpInfo whose eager bfloat16 or float16 unit has failing samples in
docs/coverage.json, reruns those samples and compares both results (ours and PyTorch
CPU's, same low-precision inputs) with the op computed on PyTorch CPU in float64 from
the same inputs: the larger elementwise error decides. Samples drawing random numbers
(opinfo_skips.RANDOM_SAMPLES) are left out, as in the sweep. Writes
docs/low_precision.md and its JSON twin; `--ops` reruns those OpInfos only and keeps
the other results.

    python scripts/low_precision_accuracy.py [--ops KEY,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import opinfo_harness as h  # noqa: E402
from opinfo_skips import RANDOM_SAMPLES  # noqa: E402

LOW_PRECISION = ("bfloat16", "float16")
VERDICTS = ("ours closer", "CPU closer", "equally close", "not comparable")


def _failing_units(coverage: dict, only: set[str]) -> list[tuple[str, str]]:
    units = []
    for key, info in sorted(coverage["opinfos"].items()):
        for dt in LOW_PRECISION:
            cell = info["dtypes"].get(dt, {}).get("eager")
            if cell and cell.get("failed") and (not only or key in only):
                units.append((key, dt))
    return units


def _first_tensor(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def _max_error(result, truth) -> float:
    return (result.double() - truth).abs().nan_to_num(nan=float("inf")).max().item()


def _judge(key, op, dtype, sample):
    import torch

    is_random = RANDOM_SAMPLES.get(key)
    if is_random and is_random(sample.input, sample.args, sample.kwargs):
        return None
    expected = op(sample.input, *sample.args, **sample.kwargs)
    ours_in = h.to_ours((sample.input, tuple(sample.args), dict(sample.kwargs)))
    ours = h._to_cpu(op(ours_in[0], *ours_in[1], **ours_in[2]))
    if not h._compare(ours, expected, h.tolerance(op, dtype)):
        return None  # this sample passes

    def widen(t):
        return t.double() if isinstance(t, torch.Tensor) and t.dtype == dtype else t

    truth = op(widen(sample.input), *[widen(a) for a in sample.args], **{k: widen(v) for k, v in sample.kwargs.items()})
    expected, ours, truth = _first_tensor(expected), _first_tensor(ours), _first_tensor(truth)
    comparable = all(isinstance(t, torch.Tensor) for t in (expected, ours, truth)) and expected.is_floating_point()
    if not comparable or truth.dtype != torch.float64 or expected.numel() == 0 or expected.shape != truth.shape:
        return "not comparable"
    e_cpu, e_ours = _max_error(expected, truth), _max_error(ours, truth)
    return "ours closer" if e_ours < e_cpu else "CPU closer" if e_ours > e_cpu else "equally close"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="", help="comma-separated OpInfo keys (default: every failing unit)")
    p.add_argument("--out", default=str(ROOT / "docs" / "low_precision.md"))
    args = p.parse_args(argv)
    json_path = Path(args.out).with_suffix(".json")
    only = {k for k in args.ops.split(",") if k}
    kept = json.loads(json_path.read_text()) if only and json_path.exists() else {}
    import torch

    warnings.simplefilter("ignore")
    h._setup_worker()
    coverage = json.loads((ROOT / "docs" / "coverage.json").read_text())
    units = _failing_units(coverage, only)
    results = {uid: Counter(c) for uid, c in kept.items()}
    for i, (key, dt) in enumerate(units, 1):
        op, dtype = h.opinfos()[key], getattr(torch, dt)
        counts = Counter()
        for sample in h._chain(op.sample_inputs("cpu", dtype), op.reference_inputs("cpu", dtype)):
            try:
                verdict = _judge(key, op, dtype, sample)
            except Exception:  # a sample PyTorch CPU rejects (in float64 too) is not counted
                continue
            if verdict:
                counts[verdict] += 1
        results[f"{key}|{dt}"] = counts
        print(f"[{i}/{len(units)}] {key} {dt}: " + ", ".join(f"{v} {counts[v]}" for v in VERDICTS), file=sys.stderr, flush=True)
    json_path.write_text(json.dumps({uid: dict(c) for uid, c in sorted(results.items())}, indent=1) + "\n")
    rows = [(*uid.split("|"), c) for uid, c in sorted(results.items())]
    total = sum(results.values(), Counter())
    L = [
        "# bfloat16 and float16: failing samples against float64\n",
        "Written by `python scripts/low_precision_accuracy.py`; do not edit. For each OpInfo whose eager "
        "bfloat16/float16 samples fail the comparison with PyTorch CPU in `docs/coverage.md`, both results "
        "(ours, PyTorch CPU's) are compared with PyTorch CPU's float64 result on the same inputs, by the "
        "largest elementwise error. Samples that pass are not counted.\n",
        "| total | " + " | ".join(VERDICTS) + " |",
        "|---|" + "---:|" * len(VERDICTS),
        "| all failing samples | " + " | ".join(str(total[v]) for v in VERDICTS) + " |\n",
        "| OpInfo | dtype | " + " | ".join(VERDICTS) + " |",
        "|---|---|" + "---:|" * len(VERDICTS),
    ]
    L += [f"| {key} | {dt} | " + " | ".join(str(c[v]) for v in VERDICTS) + " |" for key, dt, c in rows]
    Path(args.out).write_text("\n".join(L) + "\n")
    print(f"{sum(total.values())} failing samples: " + ", ".join(f"{v} {total[v]}" for v in VERDICTS), file=sys.stderr)


if __name__ == "__main__":
    main()
