"""Aten names in programs (Note [Op names in programs] in runtime/exec/eager.py): every
lowering runs in a named scope, so StableHLO locations and HLO metadata of eager,
compiled, lazy and torch.compile programs name their aten ops; `xnf.hlo()`; the scopes
change no instruction; the XLA_NATIVE_FUNCTIONS_DEBUG settings."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions import ir
from xla_native_functions.runtime.exec import eager, graph, registry
from xla_native_functions.runtime.platform.config import Config
from xla_native_functions.runtime.platform.debug_env import apply_debug_env


@pytest.fixture(autouse=True)
def fresh_graph_cache(monkeypatch):
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(graph, "_LAST_KEYS", {})


def step(a, b):
    return torch.softmax(a @ b + 1, dim=-1).sum(0)


def inputs():
    torch.manual_seed(0)
    return xnf.to_xla(torch.randn(4, 8)), xnf.to_xla(torch.randn(8, 3))


def test_compiled_graph_locations_and_metadata_name_aten_ops():
    a, b = inputs()
    text = xnf.hlo(step, a, b)
    assert text.startswith("// graph 1 of 1\n") and "stablehlo.dot_general" in text
    for name in ("aten::mm", "aten::add.Tensor", "aten::_softmax", "aten::sum.dim_IntList"):
        assert f'{name}/' in text, name
    hlo = xnf.hlo(step, a, b, dialect="hlo")
    assert re.search(r'dot\(.*metadata=\{op_name="[^"]*aten::mm/', hlo)
    optimized = xnf.hlo(step, a, b, dialect="optimized_hlo")
    assert re.search(r'metadata=\{op_name="[^"]*aten::_softmax/', optimized)
    # the function ran, traced: its result is right
    torch.testing.assert_close(xnf.to_torch(xnf.compile(step)(a, b)), step(*xnf.to_torch((a, b))))


def test_hlo_of_a_compiled_function_and_of_lazy_mode_graphs():
    a, b = inputs()
    compiled = xnf.compile(step)
    for _ in range(3):
        compiled(a, b)  # replays from now on: hlo() traces its body anyway
    assert "aten::mm/" in xnf.hlo(compiled, a, b)
    assert xnf.hlo(compiled, a, b) == xnf.hlo(step, a, b, mode="lazy")

    def with_host_read(x):
        y = x.exp()
        if y.sum().item() > 0:  # cuts the trace: two graphs
            return y.log()
        return y

    text = xnf.hlo(with_host_read, a)
    assert text.count("// graph ") == 2 and "aten::exp/" in text and "aten::log/" in text


def test_hlo_of_torch_compile_graphs():
    torch._dynamo.reset()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
        text = xnf.hlo(model, torch.randn(2, 8), mode="dynamo")
        assert "aten::addmm/" in text and "aten::relu/" in text
    finally:
        torch._dynamo.reset()


def test_eager_executables_name_their_op():
    text = eager.eager_executable(ir.Abs).lower(jnp.ones(3)).as_text(debug_info=True)
    assert "aten::abs/abs" in text
    in_place = eager.eager_executable(ir.AddTensor, in_place=True).lower(jnp.ones(3), jnp.ones(3), 1).as_text(
        debug_info=True)
    assert "aten::add.Tensor/" in in_place
    # a runtime node (a view's strided read) is named as the runtime's
    assert eager.scope_name(registry.node("strided_read")) == "xnf::strided_read"


def test_bad_arguments_raise():
    a, b = inputs()
    with pytest.raises(ValueError, match="mode must be one of 'compile', 'lazy', 'dynamo'"):
        xnf.hlo(step, a, b, mode="eager")
    with pytest.raises(ValueError, match="dialect must be one of"):
        xnf.hlo(step, a, b, dialect="llvm")
    with pytest.raises(ValueError, match="compiled no program"):
        xnf.hlo(lambda: 3)


def _strip_metadata(hlo_text: str) -> str:
    """Optimized HLO without what names and source lines change: metadata, the stack
    frame tables, the module's name."""
    body = hlo_text[hlo_text.index("\n%") if "\n%" in hlo_text else 0:]
    body = re.sub(r", metadata=\{[^}]*\}", "", body)
    return re.sub(r"\s+$", "", body, flags=re.M)


def test_named_scopes_change_no_instruction(monkeypatch):
    """A training step's compiled graph with and without the scopes: the same HLO
    instructions (optimized, as XLA runs them), metadata aside."""
    torch.manual_seed(0)
    model = xnf.to_xla(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                           torch.nn.Linear(16, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = xnf.to_xla(torch.randn(5, 8)), xnf.to_xla(torch.tensor([0, 2, 1, 1, 0]))

    def train(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    with_scopes = xnf.hlo(train, x, y, dialect="optimized_hlo")
    assert "aten::addmm/" in with_scopes
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(jax, "named_scope", lambda name: contextlib.nullcontext())
    without = xnf.hlo(train, x, y, dialect="optimized_hlo")
    assert "aten::" not in without
    assert _strip_metadata(with_scopes) == _strip_metadata(without)


# ---------------------------------------------------------------- XLA_NATIVE_FUNCTIONS_DEBUG


def test_debug_env_settings():
    config = Config()
    apply_debug_env(config, {"XLA_NATIVE_FUNCTIONS_DEBUG": " print, accuracy ,atol=1e-3,rtol=2e-4,dump=~/graphs"})
    assert config.debug_print_each_op and config.debug_accuracy_for_each_op
    assert (config.accuracy_atol, config.accuracy_rtol) == (1e-3, 2e-4)
    assert config.debug_dump_graphs == os.path.expanduser("~/graphs")
    untouched = Config()
    apply_debug_env(untouched, {})
    assert untouched == Config()
    for bad, message in (
        ("prnt", "unknown setting 'prnt'; the settings are print, accuracy, atol=..., rtol=..., dump=..."),
        ("atol=small", "'atol=small' needs a number, like atol=1e-4"),
        ("dump", "unknown setting 'dump'"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            apply_debug_env(Config(), {"XLA_NATIVE_FUNCTIONS_DEBUG": bad})


def test_debug_env_in_a_process(tmp_path):
    """print and dump from the environment, without code: each op printed, each
    compiled graph written with its aten names; a wrong setting stops the import."""
    program = textwrap.dedent("""
        import torch, xla_native_functions as xnf
        x = xnf.to_xla(torch.ones(2, 3))
        y = x.abs()
        xnf.compile(lambda a: (a * 2).exp())(x)
        xnf.config.debug_print_each_op = False
        print("done")
    """)
    env = dict(os.environ, XLA_NATIVE_FUNCTIONS_DEBUG=f"print,dump={tmp_path}")
    run = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "[xla_native_functions] aten.abs.default(XlaTensor[2, 3]:float32)" in run.stdout
    dumps = sorted(tmp_path.glob("*-compile.mlir"))
    assert len(dumps) == 1
    text = dumps[0].read_text()
    assert "aten::mul.Tensor/" in text and "aten::exp/" in text
    env["XLA_NATIVE_FUNCTIONS_DEBUG"] = "verbose"
    run = subprocess.run([sys.executable, "-c", "import xla_native_functions"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode != 0 and "XLA_NATIVE_FUNCTIONS_DEBUG='verbose': unknown setting 'verbose'" in run.stderr
