"""`python -m xla_native_functions.analyze` and `xnf.analyze` (runtime/frontends/analyze.py,
docs/analyze.md): every unsupported op of a program in one run, each at its call site
and module path, the program running on to its end (its printed values checked against
the same script on PyTorch CPU); recompilations and host syncs with their causes;
accuracy, lowerings and graph texts; the report against its JSON Schema. The CLI runs
in subprocesses, which is also where operators are taken out of the runtime."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.frontends import analysis_report
from xla_native_functions.runtime.frontends.analysis_report import SCHEMA, scaffold_command, validate

REPO = Path(__file__).resolve().parent.parent

# Runs the CLI after changing the runtime as the JSON spec (argv[1]) says: operators
# taken out of the registry ("remove"), lowerings or shape functions made to raise
# (their raising code compiled under a file name in lowerings/ or shape_fns/, as the
# real ones are), lowerings made wrong by +0.5 ("skew").
RUNNER = r'''
import json, sys
from pathlib import Path
import torch
import xla_native_functions as xnf
from xla_native_functions import lowerings, shape_fns
from xla_native_functions.runtime.api import analyze_main
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
for name in spec.get("skew", []):
    original = NODES[name].lower
    NODES[name].lower = staticmethod(lambda *args, original=original: original(*args) + 0.5)
sys.exit(analyze_main(sys.argv[2:]))
'''

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
a = torch.tanh(x)  # its lowering raises
b = torch.sigmoid(x)  # its shape function raises
c = torch.relu(x)  # its lowering is off by 0.5
d = torch.exp(x)
print(f"values {a.sum().item():.6f} {b.sum().item():.6f} {d.sum().item():.6f}")
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
    print(type(y.numpy()).__name__)
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


def _cpu_output(script: Path) -> str:
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=script.parent, check=True)
    return out.stdout


def _analyze(tmp: Path, source: str, *options: str, spec: dict | None = None, args: tuple = (),
             name: str = "script.py") -> tuple[dict, subprocess.CompletedProcess]:
    script = tmp / name
    script.write_text(source)
    cmd = [sys.executable, "-c", RUNNER, json.dumps(spec or {}), *options, "--output", str(tmp / "out"), str(script),
           *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    path = tmp / "out" / "result.json"
    assert path.exists(), f"no report written:\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(path.read_text())
    assert validate(report) == [], validate(report)
    return report, proc


def _losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"loss (-?[\d.]+)", stdout)]


@pytest.fixture(scope="module")
def supported_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("supported")
    report, proc = _analyze(tmp, SUPPORTED)
    return report, proc, _cpu_output(tmp / "script.py")


def test_a_fully_supported_script_reports_100_percent(supported_run):
    report, proc, cpu_stdout = supported_run
    assert proc.returncode == 0, proc.stderr
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
    assert _losses(proc.stdout) == pytest.approx(_losses(cpu_stdout), abs=2e-5)
    assert len(_losses(proc.stdout)) == 3
    assert "support: 100.00% of" in proc.stderr and "unsupported operators: none" in proc.stderr


def test_the_report_is_sorted_and_free_of_timestamps(supported_run, tmp_path):
    report, _, _ = supported_run
    text = json.dumps(report, indent=2, sort_keys=True)
    assert not re.search(r"\d{4}-\d\d-\d\dT|\d\d:\d\d:\d\d", text)
    without_time = {k: v for k, v in report.items() if k not in ("time", "support")}
    again, _ = _analyze(tmp_path, SUPPORTED)
    assert {k: v for k, v in again.items() if k not in ("time", "support")} == without_time


@pytest.fixture(scope="module")
def unsupported_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unsupported")
    report, proc = _analyze(tmp, UNSUPPORTED, spec={"remove": ["erfinv", "i0"]})
    return report, proc, _cpu_output(tmp / "script.py")


def test_every_unsupported_op_appears_at_its_call_site_and_the_script_runs_on(unsupported_run):
    report, proc, cpu_stdout = unsupported_run
    assert proc.returncode == 0, proc.stderr
    line = _line_of(UNSUPPORTED, "two ops taken out")
    unsupported = report["unsupported_operators"]
    assert sorted(unsupported) == ["aten::erfinv", "aten::i0"]  # both, in one run
    i0 = unsupported["aten::i0"]
    assert i0["reason"] == "not in the manifest"
    assert i0["count"] == 4  # 2 layers x 2 steps
    assert [(s["file"], s["line"], s["module"], s["count"]) for s in i0["call_sites"]] == [
        ("script.py", line, "model.layers.0", 2), ("script.py", line, "model.layers.1", 2)]
    assert i0["call_sites"][0]["source"] == UNSUPPORTED.splitlines()[line - 1].strip()
    assert i0["scaffold"] == "python -m codegen.scaffold aten::i0"
    erfinv_sites = {(s["module"], s["backward_of"]) for s in unsupported["aten::erfinv"]["call_sites"]}
    # erfinv's derivative calls erfinv again: attributed to the forward call that made the node
    assert erfinv_sites == {("model.layers.0", ""), ("model.layers.1", ""),
                            ("model.layers.0", "ErfinvBackward0"), ("model.layers.1", "ErfinvBackward0")}
    assert all(s["line"] == line for s in unsupported["aten::erfinv"]["call_sites"])
    assert report["support"]["occurrences"]["unsupported"] == unsupported["aten::erfinv"]["count"] + 4
    assert float(report["support_percentage"].rstrip("%")) < 100
    # the ops ran on PyTorch CPU and the script went on, with PyTorch's values
    assert "the end of the script" in proc.stdout
    assert _losses(proc.stdout) == pytest.approx(_losses(cpu_stdout), abs=2e-5)
    assert f"script.py:{line}  model.layers.0" in proc.stderr
    assert "add it: python -m codegen.scaffold aten::erfinv" in proc.stderr


def test_lowering_and_shape_function_failures_run_on_cpu_and_accuracy_finds_a_wrong_lowering(tmp_path):
    report, proc = _analyze(tmp_path, FAILING, "--accuracy", "--verbosity", "1",
                            spec={"raise_lowering": ["tanh"], "raise_shape": ["sigmoid"], "skew": ["relu"]})
    assert proc.returncode == 0, proc.stderr
    unsupported = report["unsupported_operators"]
    assert unsupported["aten::tanh"]["reason"] == "lowering raised: RuntimeError: injected lowering failure"
    assert unsupported["aten::sigmoid"]["reason"] == "shape function raised: RuntimeError: injected shape function failure"
    assert unsupported["aten::tanh"]["call_sites"][0]["line"] == _line_of(FAILING, "its lowering raises")
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    printed = [float(v) for v in re.search(r"values (\S+) (\S+) (\S+)", proc.stdout).groups()]
    assert printed == pytest.approx([torch.tanh(x).sum().item(), torch.sigmoid(x).sum().item(), torch.exp(x).sum().item()],
                                    abs=1e-5)
    [relu] = [a for a in report["accuracy"] if a["op"] == "aten::relu"]
    assert relu["max_abs_diff"] == pytest.approx(0.5, abs=1e-6)
    assert relu["call_site"]["line"] == _line_of(FAILING, "off by 0.5")
    assert [a["op"] for a in report["accuracy"]] == ["aten::relu"]  # exp, and the ops run on CPU, agree
    # verbosity 1: the StableHLO of each op's lowering
    exp = report["supported_operators"]["aten::exp"]["stablehlo"]
    assert exp["inputs"] == "(float32[3, 4])" and exp["operations"].get("stablehlo.exponential") == 1


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compiled")
    return _analyze(tmp, RECOMPILING, "--mode", "compiled", "--verbosity", "2")


def test_compiled_mode_reports_recompiles_with_their_cause_and_host_syncs_with_their_line(compiled_run):
    report, proc = compiled_run
    assert proc.returncode == 0, proc.stderr
    assert "done" in proc.stdout
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


def test_verbosity_2_attributes_each_instruction_to_its_op_and_line(compiled_run):
    report, _ = compiled_run
    line = _line_of(RECOMPILING, "loss = model(x)")
    texts = [p["hlo"]["text"] for p in report["graphs"]["programs"]]
    assert any(f"// aten::addmm at script.py:{line} (model.0)" in t for t in texts)
    assert any(f"// aten::relu at script.py:{line} (model.1)" in t for t in texts)
    assert any(re.search(r"dot\(.*// aten::addmm at script.py", t) for t in texts)
    counts = [p["hlo"]["instructions_by_op"] for p in report["graphs"]["programs"]]
    assert any(c.get("aten::addmm", 0) > 0 for c in counts)


def test_dynamo_mode_reports_graph_breaks_and_unsupported_nodes_at_their_lines(tmp_path):
    report, proc = _analyze(tmp_path, DYNAMO, "--mode", "dynamo", spec={"remove": ["erfinv"]})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("inside forward") == 2 and "done" in proc.stdout
    line = _line_of(DYNAMO, "taken out of the runtime")
    sites = report["unsupported_operators"]["aten::erfinv"]["call_sites"]
    assert ("script.py", line, "model") in {(s["file"], s["line"], s["module"]) for s in sites}
    assert report["unsupported_operators"]["aten::erfinv"]["count"] >= 2  # run on PyTorch CPU
    breaks = report["graphs"]["graph_breaks"]
    assert any(b["call_site"] and b["call_site"]["line"] == _line_of(DYNAMO, "a graph break") and "print" in b["reason"]
               for b in breaks), breaks
    assert report["supported_operators"]["aten::addmm"]["count"] >= 2


def test_cpu_moves_written_in_the_script_keep_tensors_here_and_steps_stop_early(tmp_path):
    report, proc = _analyze(tmp_path, TO_CPU, "--steps", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ndarray", "ndarray"]  # .numpy() of the result: a real host copy
    assert report["supported_operators"]["aten::addmm"]["count"] == 2  # the model ran here
    assert report["program"]["top_level_calls"] == 2
    assert report["program"]["stopped"].startswith("--steps 2: stopped before call 3")


def test_an_op_without_a_cpu_kernel_ends_the_run_with_the_report(tmp_path):
    report, proc = _analyze(tmp_path, LSTM, spec={"remove": ["_thnn_fused_lstm_cell"]})
    assert proc.returncode == 1
    assert "before the cell" in proc.stdout and "after the cell" not in proc.stdout
    lstm = report["unsupported_operators"]["aten::_thnn_fused_lstm_cell"]
    assert lstm["reason"] == "no CPU kernel"
    assert (lstm["call_sites"][0]["line"], lstm["call_sites"][0]["module"]) == (_line_of(LSTM, "h, c = cell"), "cell")
    assert "has no CPU kernel either" in report["program"]["stopped"]


def test_fail_under_sets_the_exit_status(unsupported_run, tmp_path):
    report, _, _ = unsupported_run
    percent = report["support"]["occurrences"]["percent"]
    spec = {"remove": ["erfinv", "i0"]}
    _, below = _analyze(tmp_path, UNSUPPORTED, "--fail-under", str(percent + 1), spec=spec)
    assert below.returncode == 1 and "is below --fail-under" in below.stderr
    _, above = _analyze(tmp_path, UNSUPPORTED, "--fail-under", str(percent - 1), spec=spec)
    assert above.returncode == 0
    assert "(replaced the previous report)" in above.stderr


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
    with pytest.raises(ValueError, match="only eager mode has"):
        xnf.analyze(torch.abs, torch.ones(2), mode="compiled", accuracy=True)
    with pytest.raises(ValueError, match="verbosity must be 0, 1 or 2"):
        xnf.analyze(torch.abs, torch.ones(2), verbosity=3)


def test_an_error_of_the_program_is_recorded_in_the_report():
    def broken(x):
        y = x.abs()
        raise KeyError("the program's own error")

    report = xnf.analyze(broken, torch.ones(2))
    assert report["program"]["error"]["type"] == "KeyError"
    assert report["program"]["error"]["line"] == broken.__code__.co_firstlineno + 2
    assert report["supported_operators"]["aten::abs"]["count"] == 1


def test_the_validator_rejects_what_the_schema_forbids(supported_run):
    report = json.loads(json.dumps(supported_run[0]))
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
