"""torch.autocast("jax", dtype=...) casts as torch.autocast("cpu", ...) does (Note
[Autocast] in runtime/core/autocast.py): the same op list (every op with an AutocastCPU
kernel gets one for our device, and only those), the same policy per op (lower precision
for products and convolutions, float32 for losses and the ops CPU lists, the widest type
for cat/stack/index_copy, double untouched), and the same dtypes for every intermediate
and final value of a model, with values within low-precision tolerance, in eager mode,
compile(), lazy_mode() and the torch.compile backend, inference and training."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xla_native_functions as xnf
from xla_native_functions.runtime.core.autocast import cpu_autocast_ops
from xla_native_functions.runtime.platform.metrics import metrics

LOW = [torch.bfloat16, torch.float16]
TOL = {torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _to_xla(x):
    return xnf.to_xla(x) if isinstance(x, torch.Tensor) else [_to_xla(y) for y in x] if isinstance(x, list) else x


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def test_autocast_for_our_device_is_on_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast("jax", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("jax")
            a = xnf.to_xla(torch.randn(2, 3))
            assert (a @ a.t()).dtype == torch.bfloat16
    assert torch.jax.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


def test_the_op_list_is_cpus():
    with torch.autocast("jax", dtype=torch.bfloat16):
        pass  # registers the kernels
    listed = cpu_autocast_ops()
    assert len(listed) > 100  # PyTorch 2.13 lists 127 overloads
    for op in listed:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "AutocastPrivateUse1"), op
    names = {op.name() for op in listed}
    for name in torch._C._dispatch_get_all_op_names():
        if name not in names:
            assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastPrivateUse1"), name


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# name -> (function, inputs): each policy, with float32, low-precision, mixed and double inputs
OPS = {
    # lower precision
    "mm": (torch.mm, lambda low: [_r(3, 4), _r(4, 5)]),
    "mm_double": (torch.mm, lambda low: [_r(3, 4, dtype=torch.float64), _r(4, 5, dtype=torch.float64)]),
    "mm_int": (torch.mm, lambda low: [torch.randint(0, 5, (3, 4)), torch.randint(0, 5, (4, 2))]),
    "addmm_mixed": (torch.addmm, lambda low: [_r(5), _r(3, 4, dtype=low), _r(4, 5)]),
    "linear": (F.linear, lambda low: [_r(2, 3, 4), _r(5, 4), _r(5)]),
    "bmm": (torch.bmm, lambda low: [_r(2, 3, 4), _r(2, 4, 5)]),
    "baddbmm": (torch.baddbmm, lambda low: [_r(2, 3, 5), _r(2, 3, 4), _r(2, 4, 5)]),
    "matmul": (torch.matmul, lambda low: [_r(2, 3, 4), _r(4)]),
    "conv1d": (F.conv1d, lambda low: [_r(2, 3, 8), _r(4, 3, 3), _r(4)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), lambda low: [_r(1, 2, 5, 5), _r(3, 2, 3, 3)]),
    "conv_transpose2d": (F.conv_transpose2d, lambda low: [_r(1, 2, 4, 4), _r(2, 3, 3, 3)]),
    "prelu": (F.prelu, lambda low: [_r(2, 3, 4), _r(3)]),
    "sdpa": (F.scaled_dot_product_attention, lambda low: [_r(1, 2, 4, 8), _r(1, 2, 4, 8), _r(1, 2, 4, 8)]),
    # float32
    "mse_loss": (F.mse_loss, lambda low: [_r(4, 3, dtype=low), _r(4, 3, dtype=low)]),
    "l1_loss": (F.l1_loss, lambda low: [_r(4, 3, dtype=low), _r(4, 3, dtype=low)]),
    "huber_loss": (F.huber_loss, lambda low: [_r(4, 3, dtype=low), _r(4, 3, dtype=low)]),
    "cross_entropy": (F.cross_entropy, lambda low: [_r(4, 5, dtype=low), torch.tensor([0, 4, 2, 1])]),
    "nll_loss": (F.nll_loss, lambda low: [_r(4, 5, dtype=low).log_softmax(-1), torch.tensor([0, 4, 2, 1])]),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, lambda low: [_r(4, dtype=low), torch.rand(4).to(low)]),
    "kl_div": (
        lambda a, b: F.kl_div(a, b, reduction="batchmean"),
        lambda low: [_r(3, 4, dtype=low).log_softmax(-1), _r(3, 4, dtype=low).softmax(-1)],
    ),
    "prod": (torch.prod, lambda low: [_r(5, dtype=low)]),
    "cdist": (torch.cdist, lambda low: [_r(3, 4, dtype=low), _r(5, 4, dtype=low)]),
    "trace": (torch.trace, lambda low: [_r(4, 4, dtype=low)]),
    "reflection_pad1d": (lambda x: F.pad(x, (2, 1), mode="reflect"), lambda low: [_r(1, 2, 5, dtype=low)]),
    "fft_rfft": (torch.fft.rfft, lambda low: [_r(8, dtype=torch.float16)]),
    # widest input type
    "cat": (torch.cat, lambda low: [[_r(2, 3, dtype=low), _r(2, 3)]]),
    "cat_low": (torch.cat, lambda low: [[_r(2, 3, dtype=low), _r(1, 3, dtype=low)]]),
    "stack": (torch.stack, lambda low: [[_r(3), _r(3, dtype=low)]]),
    "index_copy": (
        lambda s, i, t: s.index_copy(0, i, t),
        lambda low: [_r(4, 2, dtype=low), torch.tensor([2, 0]), _r(2, 2)],
    ),
    # not listed: input dtypes kept
    "softmax": (lambda x: x.softmax(-1), lambda low: [_r(3, 4, dtype=low)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda low: [_r(3, 4, dtype=low), _r(4), _r(4)]),
    "add_mixed": (torch.add, lambda low: [_r(3, dtype=low), _r(3)]),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_each_policy_matches_cpu_autocast(name, dtype):
    fn, make = OPS[name]
    torch.manual_seed(0)
    inputs = make(dtype)
    with torch.autocast("cpu", dtype=dtype):
        expected = _flat(fn(*inputs))
    with torch.autocast("jax", dtype=dtype):
        ours = _flat(fn(*_to_xla(inputs)))
    assert [o.dtype for o in ours] == [e.dtype for e in expected]
    for o, e in zip(ours, expected):
        tol = TOL.get(e.dtype, TOL[dtype])
        torch.testing.assert_close(xnf.to_torch(o), e, **tol)


def test_an_autocast_error_of_cpu_is_ours():
    # promote: bfloat16 and float32 inputs under float16 autocast is an error on the CPU
    inputs = [_r(2, 3, dtype=torch.bfloat16), _r(2, 3)]
    with torch.autocast("cpu", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType in at::autocast::prioritize"):
            torch.cat(inputs)
    with torch.autocast("jax", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType in at::autocast::prioritize"):
            torch.cat(_to_xla(inputs))


class Block(nn.Module):
    """Convolution, products, normalization, attention, activations, a loss."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.qkv = nn.Linear(8, 24)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 5)

    def forward(self, x, target):
        h = self.conv(x).transpose(1, 2)  # (B, T, 8)
        h = self.norm(h)
        q, k, v = self.qkv(h).chunk(3, -1)
        h = h + F.scaled_dot_product_attention(q, k, v)
        h = h + self.mlp(h)
        logits = self.head(h).mean(1)
        probs = logits.softmax(-1)
        loss = F.cross_entropy(logits, target)
        return logits, probs, loss


def _record_dtypes(model):
    seen = []
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: seen.append(
        (name, tuple(o.dtype for o in _flat(out) if isinstance(o, torch.Tensor)))))
        for name, m in model.named_modules() if name]
    return seen, hooks


def _reference(dtype, x, target, train):
    torch.manual_seed(0)
    model = Block()
    seen, hooks = _record_dtypes(model)
    with torch.autocast("cpu", dtype=dtype):
        outs = model(x, target)
    grads = None
    if train:
        outs[2].backward()
        grads = {n: p.grad for n, p in model.named_parameters()}
    for h in hooks:
        h.remove()
    return seen, outs, grads


def _check(dtype, ref, seen, outs, model, train):
    ref_seen, ref_outs, ref_grads = ref
    assert seen == ref_seen  # every module's output dtypes, in order
    assert [o.dtype for o in outs] == [o.dtype for o in ref_outs]
    assert [o.dtype for o in ref_outs] == [dtype, dtype, torch.float32]
    for o, e in zip(outs, ref_outs):
        torch.testing.assert_close(xnf.to_torch(o).detach(), e.detach(), **TOL[dtype])
    if train:
        for n, p in model.named_parameters():
            assert p.grad.dtype == torch.float32, n  # gradients flow back through the casts
            torch.testing.assert_close(xnf.to_torch(p.grad), ref_grads[n], **TOL[dtype], msg=n)


def _replays():
    return metrics.replays


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("mode", ["eager", "compile", "lazy_mode"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_model_dtypes_and_values_match_cpu_autocast(dtype, mode, train):
    torch.manual_seed(1)
    x, target = torch.randn(2, 4, 6), torch.tensor([1, 4])
    ref = _reference(dtype, x, target, train)
    torch.manual_seed(0)
    model = xnf.to_xla(Block())
    seen, hooks = _record_dtypes(model)
    xx, tt = xnf.to_xla(x), xnf.to_xla(target)

    def step(a, b):
        with torch.autocast("jax", dtype=dtype):
            outs = model(a, b)
        if train:
            outs[2].backward()
        return tuple(o.detach() for o in outs)

    if mode == "eager":
        outs = step(xx, tt)
    elif mode == "compile":
        compiled = xnf.compile(step)
        before = _replays()
        for _ in range(4):  # traced, then replayed
            for p in model.parameters():
                p.grad = None
            outs = compiled(xx, tt)
        assert _replays() > before
        # the module outputs' dtypes as the first (traced) call saw them: a replay runs no hooks
        seen[:] = seen[: len(ref[0])]
    else:
        with xnf.lazy_mode():
            outs = step(xx, tt)
            xnf.mark_step()
    for h in hooks:
        h.remove()
    _check(dtype, ref, seen, outs, model, train)


def test_autocast_around_a_compiled_call_is_part_of_its_signature():
    torch.manual_seed(0)
    model = xnf.to_xla(nn.Linear(4, 3))
    x = xnf.to_xla(torch.randn(2, 4))
    compiled = xnf.compile(lambda a: model(a))
    for _ in range(4):  # alternating: each state replays its own program
        with torch.autocast("jax", dtype=torch.bfloat16):
            assert compiled(x).dtype == torch.bfloat16
        assert compiled(x).dtype == torch.float32


def test_disabled_and_nested_autocast():
    a = xnf.to_xla(torch.randn(3, 3))
    with torch.autocast("jax", dtype=torch.bfloat16, enabled=False):
        assert (a @ a).dtype == torch.float32
    with torch.autocast("jax", dtype=torch.bfloat16):
        with torch.autocast("jax", enabled=False):
            assert (a @ a).dtype == torch.float32
        assert (a @ a).dtype == torch.bfloat16
    assert (a @ a).dtype == torch.float32


def test_cpu_autocast_does_not_cast_our_tensors():
    # Each device's autocast casts its own tensors, as on PyTorch.
    a = xnf.to_xla(torch.randn(3, 3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.float32


def test_torch_compile_backend_with_cpu_autocast():
    # The backend's model stays on the CPU: autocast("cpu") is traced into its graphs.
    torch.manual_seed(1)
    x, target = torch.randn(2, 4, 6), torch.tensor([1, 4])
    ref_seen, ref_outs, ref_grads = _reference(torch.bfloat16, x, target, True)
    torch.manual_seed(0)
    model = Block()
    compiled = torch.compile(model, backend="xla_native")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = compiled(x, target)
    outs[2].backward()
    assert [o.dtype for o in outs] == [o.dtype for o in ref_outs]
    for o, e in zip(outs, ref_outs):
        torch.testing.assert_close(o.detach(), e.detach(), **TOL[torch.bfloat16])
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[n], **TOL[torch.bfloat16], msg=n)


def test_activation_checkpointing_under_autocast():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ours = xnf.to_xla(copy.deepcopy(cpu))
    x = torch.randn(3, 4)
    from torch.utils.checkpoint import checkpoint

    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = checkpoint(cpu, x, use_reentrant=False)
    expected.float().sum().backward()
    with torch.autocast("jax", dtype=torch.bfloat16):
        out = checkpoint(ours, xnf.to_xla(x), use_reentrant=False)
    out.float().sum().backward()
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(xnf.to_torch(out.detach()), expected.detach(), **TOL[torch.bfloat16])
    for (n, p), q in zip(ours.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(xnf.to_torch(p.grad), q.grad, **TOL[torch.bfloat16], msg=n)


def test_autocast_inside_the_environment_and_under_jax_jit():
    with xnf.default_env(), torch.autocast("jax", dtype=torch.bfloat16):
        a = torch.randn(3, 3)  # made on our device by the environment
        assert (a @ a).dtype == torch.bfloat16
        assert torch.cat([a, (a @ a)]).dtype == torch.float32  # promote
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    moved = xnf.to_xla(copy.deepcopy(model))
    x = torch.randn(4, 3)

    @xnf.jax_jit
    def forward(inp):
        with torch.autocast("jax", dtype=torch.bfloat16):
            return moved(inp)

    out = forward(xnf.to_xla(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(xnf.to_torch(out), expected, **TOL[torch.bfloat16])


def test_ops_pass_autocast_enabled_by_hand_before_any_autocast_context():
    # The fallthrough for the device's autocast key is registered with the device; the
    # kernels when torch.autocast("jax") is first used. In a fresh process:
    code = textwrap.dedent("""
        import torch, xla_native_functions as xnf
        a = xnf.to_xla(torch.randn(3, 3))
        torch.set_autocast_enabled("jax", True)
        assert a.relu().dtype == torch.float32 and (a @ a).dtype == torch.float32
        torch.set_autocast_enabled("jax", False)
        with torch.autocast("jax", dtype=torch.bfloat16):
            assert (a @ a).dtype == torch.bfloat16
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
