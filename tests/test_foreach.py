"""Foreach ops (Note [Foreach ops] in runtime/supported/foreach.py) against PyTorch CPU:
functional, in-place and out= forms, type promotion, PyTorch's errors, one executable
per call, unlisted ops through PyTorch's per-tensor loop, and torch.optim's foreach
implementations (which XlaTensors now take) eagerly and compiled."""

from __future__ import annotations

import copy

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.metrics import metrics

aten = torch.ops.aten
SHAPES = [(3, 4), (5,), (), (2, 1, 3)]


def tensors(seed, dtype=torch.float32, positive=False):
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(s, generator=g).to(dtype) for s in SHAPES]
    return [t.abs() + 0.5 for t in out] if positive else out


def ours(ts):
    return [xnf.to_xla(t) for t in ts]


def like(tensor_list, t):
    """`t` on the device of the list's tensors."""
    return xnf.to_xla(t) if tensor_list[0].device.type == "jax" else t


def assert_same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = xnf.to_torch(g)
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


# (name, call): call(torch._foreach_<fn>, lists) on a, b, c (positive float lists)
CASES = [
    ("add.List", "add", lambda f, a, b, c: f(a, b, alpha=0.5)),
    ("add.Scalar", "add", lambda f, a, b, c: f(a, 2.5)),
    ("add.ScalarList", "add", lambda f, a, b, c: f(a, [1.0, 2, 3.5, -1.0])),
    ("add.Tensor", "add", lambda f, a, b, c: f(a, like(a, torch.tensor(2.0)), alpha=2)),
    ("sub.List", "sub", lambda f, a, b, c: f(a, b, alpha=2)),
    ("sub.Scalar", "sub", lambda f, a, b, c: f(a, 1.5)),
    ("sub.ScalarList", "sub", lambda f, a, b, c: f(a, [1.0, 2.0, 3.0, 4.0])),
    ("mul.List", "mul", lambda f, a, b, c: f(a, b)),
    ("mul.Scalar", "mul", lambda f, a, b, c: f(a, -3.0)),
    ("mul.ScalarList", "mul", lambda f, a, b, c: f(a, [1.0, 2.0, 0.5, 4.0])),
    ("mul.Tensor", "mul", lambda f, a, b, c: f(a, like(a, torch.tensor(0.25)))),
    ("div.List", "div", lambda f, a, b, c: f(a, c)),
    ("div.Scalar", "div", lambda f, a, b, c: f(a, 3.0)),
    ("div.ScalarList", "div", lambda f, a, b, c: f(a, [1.0, 2.0, 0.5, 4.0])),
    ("maximum.List", "maximum", lambda f, a, b, c: f(a, b)),
    ("minimum.List", "minimum", lambda f, a, b, c: f(a, b)),
    ("addcmul.Scalar", "addcmul", lambda f, a, b, c: f(a, b, c, value=0.5)),
    ("addcmul.ScalarList", "addcmul", lambda f, a, b, c: f(a, b, c, [1.0, -2.0, 0.5, 3.0])),
    ("addcdiv.Scalar", "addcdiv", lambda f, a, b, c: f(a, b, c, value=-0.5)),
    ("addcdiv.ScalarList", "addcdiv", lambda f, a, b, c: f(a, b, c, [1.0, -2.0, 0.5, 3.0])),
    ("lerp.Scalar", "lerp", lambda f, a, b, c: f(a, b, 0.3)),
    ("lerp.ScalarList", "lerp", lambda f, a, b, c: f(a, b, [0.1, 0.2, 0.3, 0.4])),
    ("lerp.List", "lerp", lambda f, a, b, c: f(a, b, [x / 4 for x in c])),
    ("pow.List", "pow", lambda f, a, b, c: f(c, b)),
    ("pow.Scalar", "pow", lambda f, a, b, c: f(c, 1.5)),
    ("pow.ScalarAndTensor", "pow", lambda f, a, b, c: f(0.9, b)),
    ("abs", "abs", lambda f, a, b, c: f(a)),
    ("neg", "neg", lambda f, a, b, c: f(a)),
    ("reciprocal", "reciprocal", lambda f, a, b, c: f(c)),
    ("sign", "sign", lambda f, a, b, c: f(a)),
    ("sqrt", "sqrt", lambda f, a, b, c: f(c)),
]


def _lists():
    return tensors(0), tensors(1), tensors(2, positive=True)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_functional(case):
    _, fn, call = case
    ref = call(getattr(torch, f"_foreach_{fn}"), *_lists())
    got = call(getattr(torch, f"_foreach_{fn}"), *[ours(x) for x in _lists()])
    assert_same(got, ref)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "pow.ScalarAndTensor"], ids=lambda c: c[0])
def test_inplace_writes_every_tensor(case):
    _, fn, call = case
    ref_lists = _lists()
    our_lists = [ours(x) for x in ref_lists]
    f_ref, f_ours = getattr(torch, f"_foreach_{fn}_"), getattr(torch, f"_foreach_{fn}_")
    # pow.List and the like update their first list, whichever argument it is
    first = next(i for i, x in enumerate(ref_lists) if call(lambda *a, **k: a[0], *ref_lists) is x)
    call(f_ref, *ref_lists)
    call(f_ours, *our_lists)
    assert_same(our_lists[first], ref_lists[first])


def test_zero_():
    ref, got = tensors(0), ours(tensors(0))
    torch._foreach_zero_(ref)
    torch._foreach_zero_(got)
    assert_same(got, ref)
    nans = [torch.full((3,), float("nan")), torch.full((2, 2), float("inf"))]
    got = ours(nans)
    torch._foreach_zero_(got)
    assert_same(got, [torch.zeros(3), torch.zeros(2, 2)])


def test_out_form():
    a, b, _ = _lists()
    ref_out = [torch.empty_like(t) for t in a]
    aten._foreach_add.List_out(a, b, alpha=2, out=ref_out)
    out = ours([torch.empty_like(t) for t in a])
    assert aten._foreach_add.List_out(ours(a), ours(b), alpha=2, out=out) is None
    assert_same(out, ref_out)


@pytest.mark.parametrize("update", [
    lambda b: torch._foreach_mul_([b[:, 1], b[2]], 2.0),
    # tensors of the list overlap: PyTorch's loop updates (0, 1) twice
    lambda b: torch._foreach_mul_([b[:, 1], b[0]], 2.0),
    # a later argument reads what an earlier update wrote
    lambda b: torch._foreach_add_([b[0], b[1]], [b[2], b[0]]),
    lambda b: torch._foreach_addcmul_([b[0], b[1]], [b[1], b[1]], [b[2], b[2]]),
    # the same tensor at the same position reads its own old value, as in PyTorch
    lambda b: torch._foreach_add_([b[0], b[1]], [b[0], b[1]], alpha=2),
], ids=["views", "overlapping views", "later read", "later read, addcmul", "same position"])
def test_in_place_through_views_reaches_the_base(update):
    base_ref = torch.arange(12.0).reshape(3, 4)
    base = xnf.to_xla(base_ref)
    update(base_ref)
    update(base)
    assert_same([base], [base_ref])


def test_type_promotion():
    ints = [torch.arange(4), torch.arange(3).reshape(3, 1)]
    assert_same(torch._foreach_add(ours(ints), 2.5), torch._foreach_add(ints, 2.5))
    assert_same(torch._foreach_mul(ours(ints), [2, 3]), torch._foreach_mul(ints, [2, 3]))
    assert_same(torch._foreach_div(ours(ints), 2), torch._foreach_div(ints, 2))
    assert_same(torch._foreach_norm(ours(tensors(0, torch.float64))), torch._foreach_norm(tensors(0, torch.float64)))


HALF_LISTS = {
    "float16": lambda: [t * 300 for t in tensors(0, torch.float16)],
    "bfloat16": lambda: [t * 300 for t in tensors(0, torch.bfloat16)],
    "mixed": lambda: [t.to(dtype) * 300 for t, dtype in zip(tensors(0), [torch.float16, torch.bfloat16] * 2)],
}


@pytest.mark.usefixtures("compiled_first_calls")
@pytest.mark.parametrize("lists", sorted(HALF_LISTS))
def test_half_precision_by_a_number_is_pytorchs(lists):
    """PyTorch CPU's _foreach_mul_ loops over mul_.Scalar, which rounds the number to each
    tensor's dtype first (the policy inplace_rounds_scalar_to_self); its functional
    forms and _foreach_div_ multiply or divide by it in float32 (docs/semantics.md,
    Rounding). None of these numbers is a float16 or bfloat16 value."""
    calls = [
        lambda a: torch._foreach_mul(a, 3001.0),
        lambda a: torch._foreach_mul(a, [0.8976, 3001, 1 / 3, 2.7182818]),
        lambda a: torch._foreach_div(a, 0.3),
        lambda a: (torch._foreach_mul_(a, 3001.0), a)[1],
        lambda a: (torch._foreach_mul_(a, [0.8976, 3001, 1 / 3, 2.7182818]), a)[1],
        lambda a: (torch._foreach_mul_([a[0], a[0]], 0.8976), a)[1],  # aliased: tensor by tensor
        lambda a: (torch._foreach_div_(a, 0.3), a)[1],
    ]
    for call in calls:
        expected = call(HALF_LISTS[lists]())
        for got, e in zip(call(ours(HALF_LISTS[lists]())), expected, strict=True):
            assert torch.equal(xnf.to_torch(got), e)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a: torch._foreach_add([], []), "Tensor list must have at least one tensor."),
        (lambda a: torch._foreach_add(a, a[:2]), "Tensor lists must have the same number of tensors, got 4 and 2"),
        (
            lambda a: torch._foreach_addcmul(a, a, a[:1]),
            "Tensor lists must have the same number of tensors, got 4 and 1",
        ),
        (lambda a: torch._foreach_mul(a, [1.0, 2.0]), "Tensor list must have same number of elements as scalar list."),
        (lambda a: torch._foreach_sqrt([]), "Tensor list must have at least one tensor."),
        (lambda a: torch._foreach_add(a, a[::-1]), "must match the size of tensor b"),
        (
            lambda a: torch._foreach_add_([t.long() for t in a], 1.5),
            "result type Float can't be cast to the desired output type Long",
        ),
    ],
)
def test_errors(call, message):
    with pytest.raises(RuntimeError, match=message.replace(".", r"\.")):
        call(tensors(0))
    with pytest.raises(RuntimeError, match=message.replace(".", r"\.")):
        call(ours(tensors(0)))


def _calls(op):
    return metrics.calls_by_id.get(id(op), 0)


def test_one_executable_per_call():
    a, b = ours(tensors(0)), ours(tensors(1))
    before = _calls(aten.add.Tensor), _calls(aten.add_.Tensor), _calls(aten._foreach_add_.List)
    torch._foreach_add_(a, b, alpha=-0.1)
    after = _calls(aten.add.Tensor), _calls(aten.add_.Tensor), _calls(aten._foreach_add_.List)
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (0, 0, 1)


def test_unlisted_ops_run_per_tensor():
    a = tensors(0)
    before = _calls(aten.erf.default)
    assert_same(torch._foreach_erf(ours(a)), torch._foreach_erf(a))
    assert _calls(aten.erf.default) - before == len(a)
    dst, ref_dst = ours(tensors(1)), tensors(1)
    torch._foreach_copy_(dst, ours(a))
    torch._foreach_copy_(ref_dst, a)
    assert_same(dst, ref_dst)


def test_compiled():
    a, b = tensors(0), tensors(1, positive=True)

    def step(xs, ys):
        torch._foreach_addcdiv_(xs, ys, ys, [0.5] * len(xs))
        return torch._foreach_norm(torch._foreach_mul(xs, 2.0))

    ref = step(a, b)
    xs, ys = ours(tensors(0)), ours(tensors(1, positive=True))
    compiled = xnf.compile(step)
    got = compiled(xs, ys)
    assert_same(got, ref)
    assert_same(xs, a)


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd-momentum-nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.01),
    "adam-amsgrad": lambda p: torch.optim.Adam(p, lr=0.1, amsgrad=True, weight_decay=0.1),
    "rmsprop-centered": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "nadam": lambda p: torch.optim.NAdam(p, lr=0.1),
    "radam": lambda p: torch.optim.RAdam(p, lr=0.1),
    "adamax": lambda p: torch.optim.Adamax(p, lr=0.1),
    "adadelta": lambda p: torch.optim.Adadelta(p),
    "asgd": lambda p: torch.optim.ASGD(p, lr=0.1),
    "rprop": lambda p: torch.optim.Rprop(p, lr=0.1),
}


def _train(model, opt, x, steps=3):
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizers_take_the_foreach_path_and_match_pytorch(name):
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    ref = _model()
    model = xnf.to_xla(copy.deepcopy(ref))
    opt = OPTIMIZERS[name](model.parameters())
    assert opt.defaults.get("foreach") is None  # the default: chosen per device and type
    from torch.optim.optimizer import _default_to_fused_or_foreach

    assert _default_to_fused_or_foreach(list(model.parameters()), False) == (False, True)
    _train(ref, OPTIMIZERS[name](ref.parameters()), x)
    _train(model, opt, xnf.to_xla(x))
    assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])


@pytest.mark.parametrize("capturable", [False, True])
def test_adamw_compiled(capturable):
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    ref = _model()
    model = xnf.to_xla(copy.deepcopy(ref))
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, capturable=capturable)
    ox = xnf.to_xla(x)

    @xnf.compile
    def step():
        opt.zero_grad()
        loss = model(ox).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    for _ in range(4):
        ref_opt.zero_grad()
        loss = ref(x).square().mean()
        loss.backward()
        ref_opt.step()
        torch.testing.assert_close(xnf.to_torch(step()), loss.detach())
    assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])
