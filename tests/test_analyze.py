"""`python -m xla_native_functions.analyze` and `xnf.analyze` (runtime/frontends/analyze.py,
docs/analyze.md): every unsupported op of a program in one run, each at its call site
and module path, the program running on to its end (its printed values checked against
the same script on PyTorch CPU); recompilations and host syncs with their causes;
accuracy, lowerings and graph texts; the report against its JSON Schema. The CLI runs
in subprocesses, which is also where operators are taken out of the runtime."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.frontends import analysis_report
from xla_native_functions.runtime.frontends.analysis_report import SCHEMA, scaffold_command, validate

REPO = Path(__file__).resolve().parent.parent

# Runs the CLI's jobs (argv[1], a JSON spec) in one process, one after the other, after
# changing the runtime as the spec says: operators taken out of the registry ("remove"),
# lowerings or shape functions made to raise (their raising code compiled under a file
# name in lowerings/ or shape_fns/, as the real ones are), lowerings made wrong by +0.5
# ("skew"). Each job's exit status, printed output and report (read before the next job
# may replace it) are written to argv[2]. One process for all of them: each start of
# one imports torch and JAX again, which is most of what a small analysis costs.
RUNNER = r"""
import contextlib, io, json, sys, traceback
from pathlib import Path
import torch
import xla_native_functions as xnf
from xla_native_functions import lowerings, shape_fns
from xla_native_functions.runtime.api import analyze_main
from xla_native_functions.runtime.exec.fallback import fallback
from xla_native_functions.runtime.exec.registry import NODES, REGISTRY, SECTIONS

spec = json.loads(sys.argv[1])
for name in spec.get("remove", []):
    for op in [op for op in list(REGISTRY) if op._schema.name in (f"aten::{name}", f"aten::{name}_")]:
        del REGISTRY[op]
    for key in [k for k in SECTIONS if k.split(".")[0] in (name, name + "_")]:
        del SECTIONS[key]

def raiser(where, what):
    source = f"def fail(*args, **kwargs):\n    raise RuntimeError('injected {what} failure')\n"
    namespace = {}
    exec(compile(source, str(Path(where.__file__).parent / "injected.py"), "exec"), namespace)
    return staticmethod(namespace["fail"])

for name in spec.get("raise_lowering", []):
    NODES[name].lower = raiser(lowerings, "lowering")
for name in spec.get("raise_shape", []):
    NODES[name].output_shape = raiser(shape_fns, "shape function")
for name in spec.get("fallback", []):  # as the generated stub of a `fallback` op does
    for op in [op for op in list(REGISTRY) if op._schema.name == f"aten::{name}" and op._overloadname == "default"]:
        REGISTRY[op] = lambda *args, op=op, **kwargs: fallback(op, args, kwargs)
    SECTIONS[name] = "fallback"
for name in spec.get("skew", []):
    original = NODES[name].lower
    NODES[name].lower = staticmethod(lambda *args, original=original: original(*args) + 0.5)

results = {}
for job in spec["jobs"]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = analyze_main(job["argv"])
        except BaseException:
            status = "raised: " + traceback.format_exc()
    result = Path(job["output"]) / "result.json"
    report = json.loads(result.read_text()) if result.exists() else None
    results[job["name"]] = {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue(), "report": report}
Path(sys.argv[2]).write_text(json.dumps(results))
"""

# A model with weights and inputs from fixed formulas, so that its printed values can
# be compared with PyTorch CPU's.
SUPPORTED = '''\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = Net()
with torch.no_grad():
    for i, p in enumerate(model.parameters()):
        p.copy_(torch.linspace(-0.5, 0.5, p.numel()).reshape(p.shape) * (i + 1) / 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.linspace(-1, 1, 32).reshape(4, 8)
target = torch.tensor([0, 1, 2, 3])
for step in range(3):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), target)
    loss.backward()
    opt.step()
    print(f"loss {loss.item():.6f}")
'''

UNSUPPORTED = '''\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        h = self.lin(x)
        return torch.erfinv(torch.tanh(h) * 0.5) + torch.special.i0(h)  # two ops taken out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


model = Model()
with torch.no_grad():
    for i, p in enumerate(model.parameters()):
        p.copy_(torch.linspace(-0.3, 0.3, p.numel()).reshape(p.shape) * (i % 2 + 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.linspace(-1, 1, 18).reshape(3, 6)
for step in range(2):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    print(f"loss {loss.item():.6f}")
print("the end of the script")
'''

FAILING = '''\
import torch

x = torch.linspace(-1, 1, 12).reshape(3, 4)
a = torch.sinh(x)  # its lowering raises
b = torch.cosh(x)  # its shape function raises
c = torch.atan(x)  # its lowering is off by 0.5
d = torch.exp(x)
e = torch.erfc(x)  # listed as fallback
print(f"values {a.sum().item():.6f} {b.sum().item():.6f} {d.sum().item():.6f} {e.sum().item():.6f}")
'''

RECOMPILING = '''\
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in (4, 4, 6, 6):
    x = torch.ones(batch, 8)
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    if loss.item() > 1e6:  # a host read in the middle of the step
        print("large")
    loss.backward()
    opt.step()
print("done")
'''

DYNAMO = '''\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("inside forward")  # a graph break
        return torch.erfinv(torch.tanh(h) * 0.5).sum()  # taken out of the runtime


model = Net()
for _ in range(2):
    out = model(torch.ones(3, 4))
    out.backward()
print("done")
'''

TO_CPU = '''\
import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(4, 2).to(device)
for i in range(5):
    x = torch.ones(3, 4).to(device)
    y = model(x).cpu()
    print(type(y.detach().numpy()).__name__)
'''

LSTM = '''\
import torch
from torch import nn

cell = nn.LSTMCell(4, 8)
print("before the cell")
h, c = cell(torch.ones(2, 4))
print("after the cell")
'''


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _cpu_output(source: str, tmp: Path) -> str:
    """What the script prints run as it is, by PyTorch on the CPU (in this process: the
    scripts import nothing of this package)."""
    script = tmp / "plain.py"
    script.write_text(source)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(script), run_name="__main__")
    return out.getvalue()


# How the CLI runs below change the runtime (RUNNER); only the scripts that show what
# happens to such an op use one of these.
CHANGES = {"remove": ["erfinv", "i0", "_thnn_fused_lstm_cell"], "raise_lowering": ["sinh"], "raise_shape": ["cosh"],
           "skew": ["atan"], "fallback": ["erfc"]}
# name: (script, options, output directory). `supported_again` replaces `supported`'s
# report, and is at the --fail-under threshold; `unsupported` is below it.
JOBS = {
    "supported": (SUPPORTED, (), "out_supported"),
    "supported_again": (SUPPORTED, ("--fail-under", "100"), "out_supported"),
    "unsupported": (UNSUPPORTED, ("--fail-under", "99.9"), "out_unsupported"),
    "failing": (FAILING, ("--accuracy", "--verbosity", "1"), "out_failing"),
    "failing_compiled": (FAILING, ("--accuracy", "--mode", "compiled"), "out_failing_compiled"),
    "compiled": (RECOMPILING, ("--mode", "compiled", "--verbosity", "2"), "out_compiled"),
    "to_cpu": (TO_CPU, ("--steps", "2"), "out_to_cpu"),
    "dynamo": (DYNAMO, ("--mode", "dynamo"), "out_dynamo"),
    "lstm": (LSTM, (), "out_lstm"),
}


class Run(NamedTuple):
    report: dict
    status: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("analyze")
    jobs = []
    for name, (source, options, output) in JOBS.items():
        script = tmp / f"{name.removesuffix('_again')}.py"
        script.write_text(source)
        jobs.append({"name": name, "output": str(tmp / output),
                     "argv": [*options, "--output", str(tmp / output), str(script)]})
    results_file = tmp / "results.json"
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps({**CHANGES, "jobs": jobs}), str(results_file)],
                          capture_output=True, text=True, cwd=tmp)
    assert proc.returncode == 0 and results_file.exists(), f"the runner failed:\n{proc.stdout}\n{proc.stderr}"
    runs = {}
    for name, r in json.loads(results_file.read_text()).items():
        assert isinstance(r["status"], int), f"{name}: {r['status']}"
        assert r["report"] is not None, f"{name}: no report written:\n{r['stdout']}\n{r['stderr']}"
        assert validate(r["report"]) == [], (name, validate(r["report"]))
        runs[name] = Run(r["report"], r["status"], r["stdout"], r["stderr"])
    return runs


def _losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"loss (-?[\d.]+)", stdout)]


def test_a_fully_supported_script_reports_100_percent(runs, tmp_path):
    report, status, stdout, stderr = runs["supported"]
    assert status == 0, stderr
    assert report["support_percentage"] == "100.00%"
    assert report["unsupported_operators"] == {}
    assert report["support"]["overloads"]["unsupported"] == 0
    ops = report["supported_operators"]
    # two nn.Linear layers, three steps: PyTorch decomposes linear into t and addmm
    assert ops["aten::addmm"]["count"] == 6
    assert ops["aten::addmm"]["section"] == "full_codegen"
    assert ops["aten::linear"]["decomposed"] is True
    assert ops["aten::linear"]["section"] == "decomposed into aten::addmm, aten::t"
    assert {s["inputs"] for s in ops["aten::addmm"]["signatures"]} == {
        "(float32[16], float32[4, 8], float32[8, 16])", "(float32[4], float32[4, 16], float32[16, 4])"}
    occurrences = report["support"]["occurrences"]
    assert occurrences["total"] == sum(e["count"] for e in ops.values() if not e.get("decomposed"))
    assert report["program"]["optimizer_steps"] == 3
    assert report["graphs"] is None and report["accuracy"] is None
    versions = report["versions"]
    assert versions["torch"] == torch.__version__ and versions["jax"] == __import__("jax").__version__
    # the script really ran here, with PyTorch's results
    assert _losses(stdout) == pytest.approx(_losses(_cpu_output(SUPPORTED, tmp_path)), abs=2e-5)
    assert len(_losses(stdout)) == 3
    assert "support: 100.00% of" in stderr and "unsupported operators: none" in stderr


def test_the_report_is_sorted_and_free_of_timestamps_and_a_new_one_replaces_it(runs):
    first, again = runs["supported"], runs["supported_again"]
    text = json.dumps(first.report, indent=2, sort_keys=True)
    assert not re.search(r"\d{4}-\d\d-\d\dT|\d\d:\d\d:\d\d", text)
    # the same script again, in a process that has run it already: the same report
    # but for the times
    assert {k: v for k, v in again.report.items() if k not in ("time", "support")} == {
        k: v for k, v in first.report.items() if k not in ("time", "support")}
    assert "(replaced the previous report)" in again.stderr and "replaced" not in first.stderr
    assert again.status == 0  # 100% is not below --fail-under 100


def test_every_unsupported_op_appears_at_its_call_site_and_the_script_runs_on(runs, tmp_path):
    report, status, stdout, stderr = runs["unsupported"]
    line = _line_of(UNSUPPORTED, "two ops taken out")
    unsupported = report["unsupported_operators"]
    assert sorted(unsupported) == ["aten::erfinv", "aten::i0"]  # both, in one run
    i0 = unsupported["aten::i0"]
    assert i0["reason"] == "not in the manifest"
    assert i0["count"] == 4  # 2 layers x 2 steps
    assert [(s["file"], s["line"], s["module"], s["count"]) for s in i0["call_sites"]] == [
        ("unsupported.py", line, "model.layers.0", 2), ("unsupported.py", line, "model.layers.1", 2)]
    assert i0["call_sites"][0]["source"] == UNSUPPORTED.splitlines()[line - 1].strip()
    assert i0["scaffold"] == "python -m codegen.scaffold aten::i0"
    erfinv_sites = {(s["module"], s["backward_of"]) for s in unsupported["aten::erfinv"]["call_sites"]}
    # erfinv's derivative calls erfinv again: attributed to the forward call that made the node
    assert erfinv_sites == {("model.layers.0", ""), ("model.layers.1", ""),
                            ("model.layers.0", "ErfinvBackward0"), ("model.layers.1", "ErfinvBackward0")}
    assert all(s["line"] == line for s in unsupported["aten::erfinv"]["call_sites"])
    assert report["support"]["occurrences"]["unsupported"] == unsupported["aten::erfinv"]["count"] + 4
    percent = report["support"]["occurrences"]["percent"]
    assert 50 < percent < 99.9 and report["support_percentage"] == f"{percent:.2f}%"
    # the ops ran on PyTorch CPU and the script went on, with PyTorch's values
    assert "the end of the script" in stdout
    assert _losses(stdout) == pytest.approx(_losses(_cpu_output(UNSUPPORTED, tmp_path)), abs=2e-5)
    assert f"unsupported.py:{line}  model.layers.0" in stderr
    assert "add it: python -m codegen.scaffold aten::erfinv" in stderr
    # --fail-under 99.9: the script ran to its end, and the status says the support is short
    assert status == 1 and f"support {report['support_percentage']} is below --fail-under 99.9%" in stderr
    assert report["program"]["error"] is None and report["program"]["stopped"] is None


@pytest.mark.parametrize("run", ["failing", "failing_compiled"])
def test_lowering_and_shape_function_failures_run_on_cpu_and_accuracy_finds_a_wrong_lowering(runs, run):
    report, status, stdout, stderr = runs[run]
    assert status == 0, stderr
    unsupported = report["unsupported_operators"]
    assert unsupported["aten::sinh"]["reason"] == "lowering raised: RuntimeError: injected lowering failure"
    assert unsupported["aten::cosh"]["reason"] == "shape function raised: RuntimeError: injected shape function failure"
    assert unsupported["aten::sinh"]["call_sites"][0]["line"] == _line_of(FAILING, "its lowering raises")
    assert unsupported["aten::cosh"]["call_sites"][0]["line"] == _line_of(FAILING, "its shape function raises")
    assert unsupported["aten::erfc"]["reason"] == "listed as fallback"
    assert unsupported["aten::erfc"]["call_sites"][0]["line"] == _line_of(FAILING, "listed as fallback")
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    printed = [float(v) for v in re.search(r"values (\S+) (\S+) (\S+) (\S+)", stdout).groups()]
    assert printed == pytest.approx([torch.sinh(x).sum().item(), torch.cosh(x).sum().item(), torch.exp(x).sum().item(),
                                     torch.erfc(x).sum().item()], abs=1e-5)
    [atan] = [a for a in report["accuracy"] if a["op"] == "aten::atan"]
    assert atan["max_abs_diff"] == pytest.approx(0.5, abs=1e-6)
    assert atan["call_site"]["line"] == _line_of(FAILING, "off by 0.5")
    assert [a["op"] for a in report["accuracy"]] == ["aten::atan"]  # exp, and the ops run on CPU, agree
    assert "aten::atan: max abs 0.5, max rel" in stderr
    if run == "failing_compiled":  # compared after the graph ran: atan was part of one
        assert any(p["ops"].get("aten::atan") for p in report["graphs"]["programs"])
        return
    # verbosity 1: the StableHLO of each op's lowering
    exp = report["supported_operators"]["aten::exp"]["stablehlo"]
    assert exp["inputs"] == "(float32[3, 4])" and exp["operations"].get("stablehlo.exponential") == 1


def test_compiled_mode_reports_recompiles_with_their_cause_and_host_syncs_with_their_line(runs):
    report, status, stdout, stderr = runs["compiled"]
    assert status == 0, stderr
    assert "done" in stdout
    graphs = report["graphs"]
    reasons = [r["reason"] for r in graphs["recompilations"]]
    # the batch of 6 changes the shape of x, of the product that the host read cuts the step at...
    assert any("(4, 8)" in r and "(6, 8)" in r for r in reasons), reasons
    assert any("(4, 16)" in r and "(6, 16)" in r for r in reasons), reasons
    # ...and nothing recompiles while the batch stays: two batch sizes, two graphs each
    assert len(reasons) <= 3
    [sync] = graphs["host_syncs"]
    assert sync["op"] == "aten::_local_scalar_dense" and sync["count"] == 4
    assert sync["call_site"]["line"] == _line_of(RECOMPILING, "a host read in the middle")
    steps = [p for p in graphs["programs"] if any(e["cause"] == "SGD.step()" for e in p["ended_by"])]
    assert steps and all(e["call_site"]["source"] == "opt.step()" for p in steps for e in p["ended_by"])
    assert report["support_percentage"] == "100.00%"
    assert "recompilations" in stderr and "host sync by aten::_local_scalar_dense at compiled.py:" in stderr


def test_verbosity_2_attributes_each_instruction_to_its_op_and_line(runs):
    report = runs["compiled"].report
    line = _line_of(RECOMPILING, "loss = model(x)")
    texts = [p["hlo"]["text"] for p in report["graphs"]["programs"]]
    assert any(f"// aten::addmm at compiled.py:{line} (model.0)" in t for t in texts)
    assert any(f"// aten::relu at compiled.py:{line} (model.1)" in t for t in texts)
    assert any(re.search(r"dot\(.*// aten::addmm at compiled.py", t) for t in texts)
    counts = [p["hlo"]["instructions_by_op"] for p in report["graphs"]["programs"]]
    assert any(c.get("aten::addmm", 0) > 0 for c in counts)


def test_dynamo_mode_reports_graph_breaks_and_unsupported_nodes_at_their_lines(runs):
    report, status, stdout, stderr = runs["dynamo"]
    assert status == 0, stderr
    assert stdout.count("inside forward") == 2 and "done" in stdout
    line = _line_of(DYNAMO, "taken out of the runtime")
    sites = report["unsupported_operators"]["aten::erfinv"]["call_sites"]
    assert ("dynamo.py", line, "model") in {(s["file"], s["line"], s["module"]) for s in sites}
    assert report["unsupported_operators"]["aten::erfinv"]["count"] >= 2  # run on PyTorch CPU
    breaks = report["graphs"]["graph_breaks"]
    assert any(b["call_site"] and b["call_site"]["line"] == _line_of(DYNAMO, "a graph break") and "print" in b["reason"]
               for b in breaks), breaks
    assert report["supported_operators"]["aten::addmm"]["count"] >= 2


def test_cpu_moves_written_in_the_script_keep_tensors_here_and_steps_stop_early(runs):
    report, status, stdout, stderr = runs["to_cpu"]
    assert status == 0, stderr
    assert stdout.split() == ["ndarray", "ndarray"]  # .numpy() of the result: a real host copy
    assert report["supported_operators"]["aten::addmm"]["count"] == 2  # the model ran here
    assert report["program"]["top_level_calls"] == 2
    assert report["program"]["stopped"].startswith("--steps 2: stopped before call 3")


def test_an_op_without_a_cpu_kernel_ends_the_run_with_the_report(runs):
    report, status, stdout, stderr = runs["lstm"]
    assert status == 1
    assert "before the cell" in stdout and "after the cell" not in stdout
    lstm = report["unsupported_operators"]["aten::_thnn_fused_lstm_cell"]
    assert lstm["reason"] == "no CPU kernel"
    assert (lstm["call_sites"][0]["line"], lstm["call_sites"][0]["module"]) == (_line_of(LSTM, "h, c = cell"), "cell")
    assert "has no CPU kernel either" in report["program"]["stopped"]
    assert "stopped: " in stderr and "has no CPU kernel either" in stderr


def test_the_cli_runs_a_zoo_training_step_end_to_end(tmp_path):
    cmd = [sys.executable, "-m", "xla_native_functions.analyze", "--steps", "2", str(REPO / "scripts" / "zoo_train.py"),
           "mlp", "--steps", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "xnf_analysis" / "result.json").read_text())  # the default output
    assert validate(report) == []
    assert report["program"]["optimizer_steps"] == 2
    assert report["program"]["stopped"] == "--steps 2: stopped after 2 optimizer steps"
    assert len(re.findall(r"step \d: loss", proc.stdout)) == 2
    assert report["support_percentage"] == "100.00%"
    assert report["supported_operators"]["aten::addmm"]["count"] == 2 * 3  # three Linear layers
    assert f"report: xnf_analysis{os.sep}result.json" in proc.stderr


# ---------------------------------------------------------------- in-process


def test_analyze_a_module_in_process_returns_the_report_and_leaves_the_module_alone():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    report = xnf.analyze(model, x)
    assert validate(report) == []
    assert report["support_percentage"] == "100.00%"
    assert report["supported_operators"]["aten::gelu"]["count"] == 1
    assert report["program"]["top_level_calls"] == 1
    assert not isinstance(model[0].weight, type(xnf.to_xla(torch.ones(1))))  # analysed on a copy
    compiled = xnf.analyze(model, x, mode="compiled")
    assert validate(compiled) == [] and compiled["graphs"]["count"] >= 1
    assert compiled["supported_operators"]["aten::addmm"]["count"] == 2


def test_options_are_checked():
    with pytest.raises(ValueError, match="mode must be one of 'eager', 'compiled', 'dynamo'"):
        xnf.analyze(torch.abs, torch.ones(2), mode="lazy")
    with pytest.raises(ValueError, match="use mode 'eager' or 'compiled' with accuracy, not 'dynamo'"):
        xnf.analyze(torch.abs, torch.ones(2), mode="dynamo", accuracy=True)
    with pytest.raises(ValueError, match="verbosity must be 0, 1 or 2"):
        xnf.analyze(torch.abs, torch.ones(2), verbosity=3)


def test_an_error_of_the_program_is_recorded_in_the_report():
    def broken(x):
        x.abs()
        raise KeyError("the program's own error")

    report = xnf.analyze(broken, torch.ones(2))
    assert report["program"]["error"]["type"] == "KeyError"
    assert report["program"]["error"]["line"] == broken.__code__.co_firstlineno + 2
    assert report["supported_operators"]["aten::abs"]["count"] == 1


def test_the_validator_rejects_what_the_schema_forbids(runs):
    report = json.loads(json.dumps(runs["supported"].report))
    assert validate(report) == []
    report["support_percentage"] = 100
    report["unsupported_operators"]["aten::x"] = {"count": -1, "reason": "r", "reasons": [], "call_sites": [],
                                                  "scaffold": "rm -rf /"}
    del report["versions"]["jax"]
    problems = validate(report)
    assert any("support_percentage" in p and "string" in p for p in problems)
    assert any("count" in p and "below 0" in p for p in problems)
    assert any("scaffold" in p for p in problems)
    assert any("lacks 'jax'" in p for p in problems)
    assert SCHEMA["properties"]["schema_version"]["const"] == analysis_report.SCHEMA_VERSION


def test_scaffold_commands_name_the_overload_the_op_derives_from():
    assert scaffold_command("aten::erfinv") == "python -m codegen.scaffold aten::erfinv"
    assert scaffold_command("aten::erfinv_") == "python -m codegen.scaffold aten::erfinv"
    assert scaffold_command("aten::add_.Tensor") == "python -m codegen.scaffold aten::add.Tensor"
    assert scaffold_command("aten::__and__.Tensor") == "python -m codegen.scaffold aten::__and__.Tensor"
    assert scaffold_command("mylib::op") == "python -m codegen.scaffold mylib::op"


def test_the_module_of_the_command_is_callable_as_the_function():
    import xla_native_functions.analyze as command  # binds xnf.analyze to the module

    report = xnf.analyze(torch.abs, torch.ones(2))
    assert report["supported_operators"]["aten::abs"]["count"] == 1
    assert callable(command)


def _documented_keys(schema: dict) -> set[str]:
    """The key names a part of the report may have, at every depth below it."""
    keys = set()
    for alternative in schema.get("anyOf", [schema]):
        for name, sub in alternative.get("properties", {}).items():
            keys |= {name} | _documented_keys(sub)
        for sub in (alternative.get("additionalProperties"), alternative.get("items")):
            if isinstance(sub, dict):
                keys |= _documented_keys(sub)
    return keys


def test_the_schema_is_the_one_docs_analyze_md_documents():
    text = (REPO / "docs" / "analyze.md").read_text()
    table = text[text.index("| key | what |"):]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", table[:table.index("\n\n")], re.M))
    assert sorted(rows) == sorted(SCHEMA["properties"])
    site_keys = set(analysis_report._SITE["properties"])
    assert site_keys <= set(re.findall(r"`(\w+)`", rows["unsupported_operators"]))  # a call site's, once
    for key, cell in rows.items():
        named = set(re.findall(r"`(\w+)`", cell)) | (site_keys if "`call_site" in cell else set())
        missing = _documented_keys(SCHEMA["properties"][key]) - named
        assert not missing, f"docs/analyze.md does not name {sorted(missing)} of {key!r}"
    assert f"`schema_version` is {analysis_report.SCHEMA_VERSION}" in text


def test_the_analysis_runs_our_lowerings_even_with_first_calls_on_pytorch():
    # With first calls answered by PyTorch CPU (the default outside this test suite), an
    # analysis would otherwise compare PyTorch's kernels with themselves.
    seen = []

    def fn(x):
        seen.append(xnf.config.first_calls_on_cpu)
        return torch.special.i1e(x * 3.25).sum()

    before = xnf.config.first_calls_on_cpu
    xnf.config.first_calls_on_cpu = True
    try:
        report = xnf.analyze(fn, torch.randn(3, 11), accuracy=True)
        assert xnf.config.first_calls_on_cpu is True
    finally:
        xnf.config.first_calls_on_cpu = before
    assert seen == [False]
    assert "aten::special_i1e" in report["supported_operators"]
