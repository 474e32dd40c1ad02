"""The analyze report of a program laid out over a mesh (docs/analyze.md, `collectives`):
per compiled program spanning several devices, the collectives XLA inserted and the
bytes they move, in compiled mode (a data-parallel training step) and in dynamo mode
(a Linear split along its contracted dim). One subprocess with 8 simulated CPU devices
runs the three analyses (JAX must see the devices from its start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distributed_harness import worker_env
from xla_native_functions.runtime.frontends.analysis_report import validate

REPO = Path(__file__).resolve().parent.parent

# A data-parallel step: the parameters replicated, the batch split over 8 devices, so
# the gradients are summed across the devices by all-reduces.
DATA_PARALLEL = '''\
import torch
import xla_native_functions.distributed as xd

mesh = xd.init_device_mesh((8,), ("dp",))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
xd.distribute_module(model, mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = xd.distribute_tensor(torch.randn(64, 16), mesh, [xd.Shard(0)])
y = xd.distribute_tensor(torch.randn(64, 4), mesh, [xd.Shard(0)])
for step in range(2):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print(f"loss {loss.item():.5f}")
'''

# The same model and step on one device: nothing to list.
ONE_DEVICE = DATA_PARALLEL.replace("xd.distribute_module(model, mesh)\n", "").replace(
    "xd.distribute_tensor(torch.randn(64, 16), mesh, [xd.Shard(0)])", "torch.randn(64, 16)").replace(
    "xd.distribute_tensor(torch.randn(64, 4), mesh, [xd.Shard(0)])", "torch.randn(64, 4)")

# A Linear whose weight and input are split along the contracted dim (the model stays
# on the CPU, as the torch.compile backend expects): each device holds a partial sum of
# the (8, 8) output, which XLA all-reduces.
ROWWISE = '''\
import torch
import xla_native_functions.distributed as xd

mesh = xd.init_device_mesh((8,), ("tp",))
torch.manual_seed(0)
model = torch.nn.Linear(16, 8)
x = torch.randn(8, 16)
xd.mark_sharding(model.weight, mesh, (None, "tp"))
xd.mark_sharding(x, mesh, (None, "tp"))
out = model(x)
print("max difference", float((out - torch.nn.functional.linear(x, model.weight, model.bias)).abs().max()))
'''

RUNNER = r"""
import contextlib, io, json, sys
from pathlib import Path
from xla_native_functions.runtime.api import analyze_main

results = {}
for name, argv in json.loads(sys.argv[1]).items():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = analyze_main(argv)
    report = json.loads((Path(argv[argv.index("--output") + 1]) / "result.json").read_text())
    results[name] = {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue(), "report": report}
Path(sys.argv[2]).write_text(json.dumps(results))
"""


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("analyze_collectives")
    jobs = {}
    for name, source, mode in (("data_parallel", DATA_PARALLEL, "compiled"), ("one_device", ONE_DEVICE, "compiled"),
                               ("rowwise", ROWWISE, "dynamo")):
        script = tmp / f"{name}.py"
        script.write_text(source)
        jobs[name] = ["--mode", mode, "--output", str(tmp / name), str(script)]
    results = tmp / "results.json"
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(jobs), str(results)], cwd=tmp,
                          env=worker_env(8), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = json.loads(results.read_text())
    for name, r in found.items():
        assert r["status"] == 0, (name, r["stderr"][-3000:])
        assert validate(r["report"]) == [], name
    return found


def test_a_data_parallel_step_lists_the_all_reduce_of_its_gradients(reports):
    r = reports["data_parallel"]
    report = r["report"]
    parameters = 16 * 32 + 32 + 32 * 4 + 4
    (entry,) = report["collectives"]  # the step's program; the setup's ran on one device
    assert (entry["kind"], entry["devices"]) == ("compile()", 8)
    program = report["graphs"]["programs"][entry["program"]]
    assert program["kind"] == "trace" and program["runs"] == 2
    assert "aten::addmm" in program["ops"]
    reduced = [c for c in entry["collectives"] if c["kind"] == "all-reduce"]
    # the gradients of the 676 float32 parameters and the loss (a mean over the split
    # batch): XLA's combiner may fuse them into fewer all-reduces, never drop one
    assert sum(c["bytes"] for c in reduced) == 4 * parameters + 4
    assert sum(c["buffers"] for c in reduced) == 4 + 1
    assert entry["bytes"] == sum(c["bytes"] for c in entry["collectives"])
    assert "collectives of programs laid out over several devices" in r["stderr"]
    assert f"program {entry['program']} (compile(), 8 devices): " in r["stderr"]
    assert f"{entry['bytes']:,} B" in r["stderr"]


def test_a_program_on_one_device_lists_none(reports):
    r = reports["one_device"]
    assert r["report"]["graphs"]["count"] >= 2 and r["report"]["collectives"] == []
    assert "collectives of programs" not in r["stderr"]


def test_dynamo_mode_lists_the_all_reduce_of_a_split_contraction(reports):
    r = reports["rowwise"]
    assert float(r["stdout"].split("max difference")[1]) < 1e-5
    (entry,) = r["report"]["collectives"]
    assert (entry["kind"], entry["devices"]) == ("torch.compile", 8)
    assert r["report"]["graphs"]["programs"][entry["program"]]["kind"] == "aten"
    assert entry["collectives"] == [{"kind": "all-reduce", "buffers": 1, "bytes": 8 * 8 * 4}]
    assert entry["bytes"] == 256
