"""Note [Sparse updates] (runtime/exec/sparse_updates.py): compiled graphs apply a scaled
scatter-add into zeros to a dense tensor as one scatter, with the dense program's values."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec import graph
from xla_native_functions.runtime.platform.metrics import metrics
from xla_native_functions.runtime.exec.sparse_updates import fold_sparse_updates

# The rewrite is counted as each graph compiles, which the first calls' interpretation
# (Note [First calls of compiled graphs]) would move to a background thread.
pytestmark = pytest.mark.usefixtures("compiled_first_calls")

ROWS, DIM = 12, 3


def _grad(idx, upd):
    return jnp.zeros((ROWS, DIM), upd.dtype).at[idx].add(upd, mode="drop")


PROGRAMS = {
    "p + c * g": lambda p, idx, upd, c: p + c * _grad(idx, upd),
    "p + g * c": lambda p, idx, upd, c: p + _grad(idx, upd) * c,
    "c * g + p": lambda p, idx, upd, c: c * _grad(idx, upd) + p,
    "p - c * g": lambda p, idx, upd, c: p - c * _grad(idx, upd),
    "p + g": lambda p, idx, upd, c: p + _grad(idx, upd),
    "p - g": lambda p, idx, upd, c: p - _grad(idx, upd),
    "p + c * (c * g)": lambda p, idx, upd, c: p + c * (c * _grad(idx, upd)),
    "p + c * -g": lambda p, idx, upd, c: p + c * -_grad(idx, upd),
    "p - -g": lambda p, idx, upd, c: p - -_grad(idx, upd),
}


def _inputs(c, unique):
    rng = np.random.default_rng(0)
    p = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    idx = np.array([0, 3, 7, 11] if unique else [0, 3, 3, 7, 0, 11, ROWS + 4, -ROWS - 9])
    upd = rng.standard_normal((len(idx), DIM)).astype(np.float32)
    return jnp.asarray(p), jnp.asarray(idx), jnp.asarray(upd), jnp.float32(c)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("c", [-0.1, 0.5, 0.0, np.inf, -np.inf, np.nan])
def test_folded_program_gives_the_dense_programs_values(name, c):
    fn = PROGRAMS[name]
    for unique in (True, False):
        args = _inputs(c, unique)
        before = metrics.sparse_updates_folded
        folded = np.asarray(jax.jit(fold_sparse_updates(fn))(*args))
        assert metrics.sparse_updates_folded == before + 1
        dense = np.asarray(jax.jit(fn)(*args))
        untouched = np.ones(ROWS, bool)
        untouched[np.asarray(args[1]) % ROWS] = False
        np.testing.assert_array_equal(folded[untouched], dense[untouched])
        if np.isinf(c):  # rows updates land on: NaN where the dense form has +-inf
            np.testing.assert_array_equal(np.isfinite(folded), np.isfinite(dense))
        else:  # rounding may differ (updates scaled before they are summed; fused multiply-adds)
            np.testing.assert_allclose(folded, dense, rtol=1e-6, atol=1e-7)


def test_folded_program_applies_one_scatter_to_the_dense_operand():
    args = _inputs(-0.1, unique=True)
    jaxpr = jax.make_jaxpr(fold_sparse_updates(PROGRAMS["p + c * g"]))(*args).jaxpr
    producer = {v: e for e in jaxpr.eqns for v in e.outvars}
    # select(c is finite, scatter, scatter + 0 * c): the scatter applies to p itself,
    # no pass over p comes before it, so XLA can update a donated p in place
    select = producer[jaxpr.outvars[0]]
    assert select.primitive is jax.lax.select_n_p
    scatter = producer[select.invars[2]]  # select_n(finite, on_false, on_true)
    assert scatter.primitive is jax.lax.scatter_add_p and scatter.invars[0] is jaxpr.invars[0]


NOT_FOLDED = {
    # a scale that is not a scalar, a scatter into something other than zeros, another consumer
    "p + v * g": lambda p, idx, upd, c: p + jnp.full((ROWS, 1), c) * _grad(idx, upd),
    "p + c * scatter(p)": lambda p, idx, upd, c: p + c * p.at[idx].add(upd, mode="drop"),
    "g - p": lambda p, idx, upd, c: _grad(idx, upd) - p,
    "p * g": lambda p, idx, upd, c: p * _grad(idx, upd),
    "p[0] + g": lambda p, idx, upd, c: p[0] + c * _grad(idx, upd),
}


@pytest.mark.parametrize("name", sorted(NOT_FOLDED))
def test_other_programs_are_left_alone(name):
    fn = NOT_FOLDED[name]
    args = _inputs(-0.1, unique=False)
    before = metrics.sparse_updates_folded
    folded = np.asarray(jax.jit(fold_sparse_updates(fn))(*args))
    assert metrics.sparse_updates_folded == before
    np.testing.assert_array_equal(folded, np.asarray(jax.jit(fn)(*args)))


def test_folded_program_keeps_its_outputs_structure():
    def fn(tables, scalars):
        p, idx, upd = tables["p"], tables["idx"], tables["upd"]
        g = _grad(idx, upd)
        return [p + scalars[0] * g, (g, idx.shape[0])]

    p, idx, upd, c = _inputs(-0.1, unique=True)
    out = jax.jit(fold_sparse_updates(fn))({"p": p, "idx": idx, "upd": upd}, (c,))
    ref = fn({"p": p, "idx": idx, "upd": upd}, (c,))
    assert jax.tree.structure(out) == jax.tree.structure(ref)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _train(model, inputs, make_opt, update, steps=4):
    opt = make_opt(model)

    def step():
        if opt is not None:
            opt.zero_grad()
        else:
            model.zero_grad()
        loss = (model(*inputs) ** 2).sum()
        loss.backward()
        if opt is not None:
            opt.step()
        else:
            update(model)
        return loss.detach()

    return step


def _manual_sgd(model):
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(p.grad, alpha=0.05)


CASES = {
    "embedding_bag sum, SGD": (lambda: torch.nn.EmbeddingBag(40, 4, mode="sum"), "bag"),
    "embedding_bag mean, SGD maximize": (lambda: torch.nn.EmbeddingBag(40, 4, mode="mean"), "bag"),
    "embedding_bag per-sample weights, sub_": (lambda: torch.nn.EmbeddingBag(40, 4, mode="sum"), "weighted"),
    "embedding padding_idx, SGD": (lambda: torch.nn.Embedding(40, 4, padding_idx=3), "embedding"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_sgd_on_embedding_tables_matches_torch_and_is_folded(name, monkeypatch):
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})  # the count is taken when a graph is traced
    build, kind = CASES[name]
    torch.manual_seed(0)
    ref_model = build()
    ours_model = xnf.to_xla(copy.deepcopy(ref_model))
    idx = torch.tensor([1, 3, 3, 39, 7, 1, 0])
    if kind == "embedding":
        ref_in = (idx.view(1, -1),)
    else:
        ref_in = (idx, torch.tensor([0, 2, 2, 5]))
        if kind == "weighted":
            ref_in += (torch.rand(len(idx)),)
    if "maximize" in name:
        make_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, maximize=True)  # noqa: E731
    elif "sub_" in name:
        make_opt = lambda m: None  # noqa: E731
    else:
        make_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
    ref_step = _train(ref_model, ref_in, make_opt, _manual_sgd)
    ours_step = xnf.compile(_train(ours_model, xnf.to_xla(ref_in), make_opt, _manual_sgd))
    before = metrics.sparse_updates_folded
    for _ in range(5):
        torch.testing.assert_close(xnf.to_torch(ours_step()), ref_step(), rtol=1e-5, atol=1e-6)
    assert metrics.sparse_updates_folded > before, "the table's update was not applied as a scatter"
    torch.testing.assert_close(xnf.to_torch(ours_model.weight), ref_model.weight.detach(), rtol=1e-5, atol=1e-6)


class _Gathered(torch.nn.Module):
    """A table read by indexing (`table[idx]`), whose gradient is an index_put into zeros."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(40, 4))

    def forward(self, idx):
        return self.table[idx]


def _interpretations(monkeypatch) -> list:
    from xla_native_functions.runtime.exec import sparse_updates

    calls: list = []
    interpret = sparse_updates._interpret
    monkeypatch.setattr(sparse_updates, "_interpret", lambda *a: calls.append(1) or interpret(*a))
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    return calls


def test_indexing_gradient_is_folded(monkeypatch):
    calls = _interpretations(monkeypatch)
    torch.manual_seed(0)
    ref_model = _Gathered()
    ours_model = xnf.to_xla(copy.deepcopy(ref_model))
    idx = torch.tensor([1, 3, 3, 39, 7])
    make_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
    ref_step = _train(ref_model, (idx,), make_opt, _manual_sgd)
    ours_step = xnf.compile(_train(ours_model, (xnf.to_xla(idx),), make_opt, _manual_sgd))
    before = metrics.sparse_updates_folded
    for _ in range(3):
        torch.testing.assert_close(xnf.to_torch(ours_step()), ref_step(), rtol=1e-5, atol=1e-6)
    assert calls and metrics.sparse_updates_folded > before
    torch.testing.assert_close(xnf.to_torch(ours_model.table), ref_model.table.detach(), rtol=1e-5, atol=1e-6)


def test_graphs_without_scattering_ops_are_not_interpreted(monkeypatch):
    """The rewrite's second pass over a program is skipped where no op scatters into zeros."""
    calls = _interpretations(monkeypatch)
    torch.manual_seed(0)
    ref_model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ours_model = xnf.to_xla(copy.deepcopy(ref_model))
    x = torch.randn(4, 8)
    make_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
    ref_step = _train(ref_model, (x,), make_opt, _manual_sgd)
    ours_step = xnf.compile(_train(ours_model, (xnf.to_xla(x),), make_opt, _manual_sgd))
    for _ in range(3):
        torch.testing.assert_close(xnf.to_torch(ours_step()), ref_step(), rtol=1e-5, atol=1e-6)
    assert calls == []
