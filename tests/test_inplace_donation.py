"""In-place ops on large tensors write into the tensor's own buffer (Note [Donated
in-place updates] in runtime/exec/mutation.py): results against PyTorch CPU, the buffer
reused when nothing else can see it, and every owner of the old array (a JAX array
handed out, another tensor after copy_ or clone, an operand reading the same storage,
a view) seeing what PyTorch's semantics say it sees."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec import first_call

N = xnf.config.donate_min_bytes // 4  # float32 elements of the smallest donated tensor


# From each signature's first call on: answered on PyTorch CPU (Note [First calls on
# PyTorch CPU]), a first call writes a fresh buffer, and donation starts once compiled.
pytestmark = pytest.mark.usefixtures("compiled_first_calls")


def big(seed=0, dtype=torch.float32, n=N):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dtype)


def buffer(t):
    return t._store.array.unsafe_buffer_pointer()


def same(ours, ref):
    got = xnf.to_torch(ours)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("update", [
    lambda p, g, h: p.add_(g, alpha=-0.05),
    lambda p, g, h: p.mul_(0.9),
    lambda p, g, h: p.lerp_(g, 0.1),
    lambda p, g, h: p.addcmul_(g, h, value=0.5),
    lambda p, g, h: p.addcdiv_(g, h.abs() + 1, value=-0.01),
    lambda p, g, h: p.sqrt_(),
    lambda p, g, h: p.clamp_(min=-0.5, max=0.5),
], ids=["add_", "mul_", "lerp_", "addcmul_", "addcdiv_", "sqrt_", "clamp_"])
def test_optimizer_updates_reuse_the_buffer(update):
    ref = [big(0).abs(), big(1), big(2)]
    ours = [xnf.to_xla(t) for t in ref]
    before = buffer(ours[0])
    out = update(*ours)
    assert out is ours[0]
    assert buffer(ours[0]) == before
    same(ours[0], update(*ref))


def test_views_read_the_updated_value():
    ref = big()
    x = xnf.to_xla(ref)
    strided, reshaped = x[::2], x.view(64, -1)
    xnf.to_torch(strided)  # a cached read of the view, to be invalidated
    before = buffer(x)
    x.add_(1.0)
    ref.add_(1.0)
    assert buffer(x) == before
    same(strided, ref[::2])
    same(reshaped, ref.view(64, -1))


def test_an_update_through_a_whole_view_reaches_the_base():
    ref = big()
    x = xnf.to_xla(ref)
    v = x.view(64, -1)
    v.mul_(3.0)
    ref.view(64, -1).mul_(3.0)
    same(x, ref)


def test_a_jax_array_handed_out_keeps_its_values():
    x = xnf.to_xla(big())
    held = xnf.to_jax(x)
    expected = np.asarray(held).copy()
    x.add_(1.0)
    assert not held.is_deleted()
    np.testing.assert_array_equal(np.asarray(held), expected)
    same(x, torch.from_numpy(expected) + 1.0)


def test_a_tensor_made_from_a_jax_array_leaves_the_array_alone():
    a = jnp.ones(N, dtype=jnp.float32)
    t = xnf.to_torch_tensor(a)
    t.mul_(2.0)
    assert not a.is_deleted()
    np.testing.assert_array_equal(np.asarray(a), np.ones(N, np.float32))
    same(t, torch.full((N,), 2.0))


@pytest.mark.parametrize("share", [
    lambda x: torch.zeros_like(x).copy_(x),
    lambda x: x.clone(),
    lambda x: x.detach(),
    lambda x: x.contiguous(),
], ids=["copy_", "clone", "detach", "contiguous"])
def test_other_tensors_keep_their_semantics(share):
    ref = big()
    x = xnf.to_xla(ref)
    y = share(x)
    ref_y = share(ref)
    x.add_(1.0)
    ref.add_(1.0)
    same(x, ref)
    same(y, ref_y)  # detach aliases x (sees the write), copy_ and clone do not


@pytest.mark.parametrize("update", [
    lambda x: x.add_(x),
    lambda x: x.mul_(x.view(64, -1).view(-1)),
    lambda x: x.addcmul_(x.view(64, -1).t().reshape(-1), x.detach()),
], ids=["self", "alias", "copy of a transposed view"])
def test_an_operand_reading_the_same_storage(update):
    ref = big()
    x = xnf.to_xla(ref)
    update(x)
    update(ref)
    same(x, ref)


def test_a_result_of_another_dtype_is_cast_into_self():
    ref = big()
    x = xnf.to_xla(ref)
    other = big(1, torch.float64)
    x.add_(xnf.to_xla(other))
    ref.add_(other)
    same(x, ref)


def test_errors_leave_self_intact():
    ref = big()
    x = xnf.to_xla(ref)
    with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[2, "):
        x.add_(xnf.to_xla(torch.ones(2, N)))
    same(x, ref)
    i = xnf.to_xla(torch.arange(N, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Int"):
        i.add_(0.5)
    same(i, torch.arange(N, dtype=torch.int32))


def _embedding_sgd():
    """A 1 MB EmbeddingBag and its SGD on PyTorch CPU and on ours, with the same weights."""
    torch.manual_seed(0)
    ref = torch.nn.EmbeddingBag(N // 128, 128, mode="sum")
    ours = xnf.to_xla(torch.nn.EmbeddingBag(N // 128, 128, mode="sum"))
    ours.load_state_dict(xnf.to_xla(ref.state_dict()))
    return ref, torch.optim.SGD(ref.parameters(), lr=0.1), ours, torch.optim.SGD(ours.parameters(), lr=0.1)


def _embedding_step(model, opt, idx, offsets):
    opt.zero_grad()
    loss = model(idx, offsets).square().sum()
    loss.backward()
    opt.step()
    return loss.detach()


EMBEDDING_BAGS = torch.tensor([1, 5, 7, 5]), torch.tensor([0, 2])  # indices, offsets


def test_sgd_on_a_large_embedding_matches_pytorch():
    ref, opt_ref, ours, opt_ours = _embedding_sgd()
    idx, offsets = EMBEDDING_BAGS
    for _ in range(3):
        _embedding_step(ref, opt_ref, idx, offsets)
        _embedding_step(ours, opt_ours, xnf.to_xla(idx), xnf.to_xla(offsets))
    same(ours.weight.detach(), ref.weight.detach())


@pytest.mark.parametrize(
    "key", ["add", "mul", "lerp", "addcdiv", "clamp", "index_add", "scatter_add", "masked_fill", "pow"]
)
def test_every_size_donated_matches_opinfo(key, monkeypatch):
    """OpInfo's in-place samples (small tensors) with donation at every size: the
    donating executables agree with PyTorch as the undonated path does."""
    import opinfo_harness as h

    monkeypatch.setattr(xnf.config, "donate_min_bytes", 0)
    with warnings.catch_warnings():  # the harness silences warnings process-wide
        h._setup_worker()
        for dtype in ("float32", "int64"):
            if not h.plan_units([key], (dtype,), ("inplace",)):
                continue
            res = h.run_unit(key, dtype, "inplace")
            assert res["status"] == "done" and res["passed"] and not res["failed"] and not res["errored"], res[
                "messages"
            ][:2]


def test_foreach_updates_reuse_the_buffers_they_may():
    """An in-place foreach op (an optimizer step) writes each tensor in place when
    nothing else holds its array; a small tensor, or one whose array is held, gets a
    new buffer, and the holder keeps the old values."""
    ref = [big(0), big(1), torch.randn(10), big(2)]
    grads = [big(3), big(4), torch.randn(10), big(5)]
    params = [xnf.to_xla(t) for t in ref]
    held = xnf.to_jax(params[3])
    before = [buffer(p) for p in params]
    torch._foreach_add_(params, [xnf.to_xla(g) for g in grads], alpha=-0.1)
    torch._foreach_add_(ref, grads, alpha=-0.1)
    for p, r in zip(params, ref):
        same(p, r)
    assert [buffer(p) == b for p, b in zip(params, before)] == [True, True, False, False]
    np.testing.assert_array_equal(np.asarray(held), big(2).numpy())


def test_foreach_updates_of_many_tensors_donate_across_executables():
    """A foreach op over more than ELEMENTS_PER_EXECUTABLE tensors runs several
    executables (Note [Foreach ops]); each gets the donated buffers of its own elements."""
    from xla_native_functions.runtime.supported.foreach import ELEMENTS_PER_EXECUTABLE

    n = 2 * ELEMENTS_PER_EXECUTABLE + 3
    donors = [i % 3 != 1 for i in range(n)]  # large tensors, with small ones between
    ref = [big(i) if d else torch.randn(10) for i, d in enumerate(donors)]
    grads = [big(100 + i) if d else torch.randn(10) for i, d in enumerate(donors)]
    params = [xnf.to_xla(t) for t in ref]
    before = [buffer(p) for p in params]
    torch._foreach_add_(params, [xnf.to_xla(g) for g in grads], alpha=-0.1)
    torch._foreach_add_(ref, grads, alpha=-0.1)
    for p, r in zip(params, ref):
        same(p, r)
    assert [buffer(p) == b for p, b in zip(params, before)] == donors


def test_foreach_errors_leave_the_tensors_intact():
    """Raised before anything is written or donated (PyTorch's loop has updated the
    tensors before the failing one: docs/semantics.md)."""
    ref = [big(0), big(1)]
    params = [xnf.to_xla(t) for t in ref]
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch._foreach_add_(params, [xnf.to_xla(torch.ones(N)), xnf.to_xla(torch.ones(2, N))])
    for p, r in zip(params, ref):
        same(p, r)


# Compiled graphs take over the buffers of the large inputs they write (Note [Donated
# graph inputs] in runtime/exec/graph.py).


@pytest.mark.parametrize("mode", ["compile", "replay=False", "lazy"])
def test_a_compiled_step_updates_a_large_table_in_its_buffer(mode):
    ref, opt_ref, ours, opt_ours = _embedding_sgd()
    idx, offsets = EMBEDDING_BAGS
    args = (ours, opt_ours, xnf.to_xla(idx), xnf.to_xla(offsets))
    if mode == "lazy":
        def step():
            with xnf.lazy_mode():
                return _embedding_step(*args)
    else:
        step = xnf.compile(lambda: _embedding_step(*args), replay=mode == "compile")
    pointers = []
    for i in range(6):
        if i == 3:  # first calls interpreted while the graph compiles (config.first_calls_on_cpu) donate nothing
            assert first_call.wait_for_background_compiles(timeout=300)
        loss = step()
        pointers.append(buffer(ours.weight))
        expected = _embedding_step(ref, opt_ref, idx, offsets)
        same(loss, expected)
    same(ours.weight.detach(), ref.weight.detach())
    # compile() learns its replay plan over the first calls, holding their inputs
    assert len(set(pointers[4:])) == 1


@pytest.mark.parametrize("mode", ["compile", "lazy"])
def test_a_compiled_step_leaves_an_array_handed_out_alone(mode):
    x = xnf.to_xla(big())

    def update():
        x.mul_(2.0)

    step = xnf.compile(update) if mode == "compile" else None
    expected = xnf.to_torch(x)
    for _ in range(5):
        held = xnf.to_jax(x)
        before = np.asarray(held).copy()
        if step is None:
            with xnf.lazy_mode():
                update()
        else:
            step()
        assert not held.is_deleted()
        np.testing.assert_array_equal(np.asarray(held), before)
        expected = expected * 2.0
        same(x, expected)


def test_a_replay_whose_guard_fails_after_a_graph_ran_keeps_its_inputs():
    """A host read inside the call splits it into graphs; when the value read differs
    in a replay, after the first graph ran, the call is traced again from the tensors
    as they were."""
    x, y = xnf.to_xla(big(0)), xnf.to_xla(big(1))
    flag = xnf.to_xla(torch.tensor(1.0))

    def update():
        x.add_(1.0)
        if (flag * 2).item() > 0:  # a value the first graph computes, read on the host
            y.mul_(2.0)
        else:
            y.mul_(3.0)

    step = xnf.compile(update)
    expected_x, expected_y = xnf.to_torch(x), xnf.to_torch(y)
    for sign in (1, 1, 1, 1, 1, -1, 1):
        flag.fill_(sign)
        step()
        expected_x, expected_y = expected_x + 1.0, expected_y * (2.0 if sign > 0 else 3.0)
        same(x, expected_x)
        same(y, expected_y)


def test_a_compiled_call_leaves_inputs_it_only_reads_to_their_owners():
    """A large tensor read by the graph and dropped during the call is not written: its
    buffer is not the graph's to take (JAX would warn that it cannot use it)."""
    pending = [xnf.to_xla(big(seed)) for seed in range(4)]
    kept = xnf.to_xla(big(9))

    def read_and_drop():
        t = pending.pop()
        return t[:8] * 2.0 + kept[:8]

    step = xnf.compile(read_and_drop, replay=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in (3, 2, 1, 0):
            same(step(), big(seed)[:8] * 2.0 + big(9)[:8])
    same(kept, big(9))


def _mlp_momentum_sgd():
    """Three Linear layers with 1 MB weights and momentum SGD, on PyTorch CPU and on
    ours with the same weights."""
    torch.manual_seed(0)
    side = int(N ** 0.5)
    ref = torch.nn.Sequential(torch.nn.Linear(side, side), torch.nn.ReLU(), torch.nn.Linear(side, side),
                              torch.nn.ReLU(), torch.nn.Linear(side, side))
    ours = xnf.to_xla(torch.nn.Sequential(*(type(m)() if not isinstance(m, torch.nn.Linear)
                                            else torch.nn.Linear(side, side) for m in ref)))
    ours.load_state_dict(xnf.to_xla(ref.state_dict()))
    opt = lambda model: torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # noqa: E731
    return ref, opt(ref), ours, opt(ours), torch.randn(4, side)


def _mlp_step(model, opt, x):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss.detach()


def test_a_compiled_step_writes_each_donated_buffer_with_its_own_new_value():
    """Each donated input is written with its storage's new value (jax.jit pairs donated
    inputs with outputs by shape, in order), and the update of a weight that the
    backward also reads (the input's gradient, which the update does not depend on)
    waits for that read. Either mistake shows as a copy of a donated parameter in the
    program, and as buffers that move from step to step."""
    ref, opt_ref, ours, opt_ours, x = _mlp_momentum_sgd()
    xo = xnf.to_xla(x)
    step = xnf.compile(lambda: _mlp_step(ours, opt_ours, xo))
    weights = [ours[k].weight for k in (0, 2, 4)]
    pointers = []
    for i in range(6):
        same(step(), _mlp_step(ref, opt_ref, x))
        if i >= 3:  # compile() replays from its fourth call on, donating what it writes
            pointers.append([buffer(w) for w in weights] +
                            [buffer(opt_ours.state[w]["momentum_buffer"]) for w in weights])
    for p, q in zip(ours.parameters(), ref.parameters()):
        same(p.detach(), q.detach())
    # every weight and momentum buffer is updated in its own buffer
    assert all(p == pointers[0] for p in pointers)
    program = xnf.hlo(lambda: _mlp_step(ours, opt_ours, xo), dialect="optimized_hlo")
    assert "donated_arrays" in program
    assert " copy(%donated_arrays" not in program
