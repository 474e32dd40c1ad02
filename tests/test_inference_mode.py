"""torch.inference_mode() on our tensors, against PyTorch CPU doing the same thing
(Note [Inference mode] in runtime/core/inference.py): values, is_inference(), requires_grad,
_version, view-ness and PyTorch's own errors, eagerly, in compile() (traced and
replayed), in lazy_mode() and through the Dynamo backend; and module forward passes
under inference mode."""

from __future__ import annotations

import copy
import io
import re

import pytest
import torch
import torch.nn as nn

import xla_native_functions as xnf
from xla_native_functions.runtime.frontends import dynamo


# ----------------------------------------------------------------- the harness


def version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError as error:  # inference tensors have no version counter
        return str(error)


def host(t: torch.Tensor) -> torch.Tensor:
    return xnf.to_torch(t.detach()) if t.device.type == "jax" else t.detach().clone()


def describe(x):
    if isinstance(x, torch.Tensor):
        return ("tensor", x.is_inference(), x.requires_grad, version(x), x._is_view(), x.is_leaf, x.dtype,
                tuple(x.shape), host(x))
    if isinstance(x, (tuple, list)):
        return tuple(describe(e) for e in x)
    return x


class Recorder:
    """Runs each step of a program, keeping what it returned (described as above) or
    what it raised; the same program runs on PyTorch CPU (`move` clones) and on ours
    (`move` is to_xla)."""

    def __init__(self, move):
        self.move = move
        self.log = []

    def __call__(self, label, fn):
        try:
            out = fn()
        except Exception as error:  # noqa: BLE001 - PyTorch's errors are what is compared
            self.log.append((label, "raises", type(error), message(error)))
            return None
        self.log.append((label, "returns", describe(out)))
        return out


def assert_same(a, b, where):
    if isinstance(a, tuple) and a and a[0] == "tensor":
        assert isinstance(b, tuple) and b and b[0] == "tensor", where
        assert a[1:-1] == b[1:-1], (
            f"{where}: (is_inference, requires_grad, _version, _is_view, is_leaf, dtype, shape) "
            f"CPU {a[1:-1]}, ours {b[1:-1]}"
        )
        torch.testing.assert_close(b[-1], a[-1], msg=lambda m: f"{where}: {m}")
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), f"{where}: CPU {a!r}, ours {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: CPU {a!r}, ours {b!r}"


_TENSOR_TYPE = re.compile(r"\[(?:torch\.|jax)(\w+?)(?:Tensor|Type) ")


def message(error: Exception) -> str:
    """The first line of an error, tensor type names (torch.FloatTensor, ours
    jaxFloatType) written alike."""
    return _TENSOR_TYPE.sub(r"[\1 ", str(error).splitlines()[0])


def check(program):
    """Run `program(rec)` on PyTorch CPU and on ours and compare every step."""
    torch.manual_seed(0)
    cpu = Recorder(lambda t: t.clone())
    program(cpu)
    torch.manual_seed(0)
    ours = Recorder(xnf.to_xla)
    program(ours)
    assert [entry[0] for entry in cpu.log] == [entry[0] for entry in ours.log]
    for c, o in zip(cpu.log, ours.log):
        label = c[0]
        if c[1] == "raises":
            assert o[1:] == c[1:], f"{label}: CPU raises {c[2].__name__}: {c[3]!r}; ours {o[1:]!r}"
        else:
            assert o[1] == "returns", f"{label}: CPU returns, ours raises {o[2].__name__}: {o[3]!r}"
            assert_same(c[2], o[2], label)


A = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
B = torch.randn(4, 6, generator=torch.Generator().manual_seed(2))


# ----------------------------------------------------------------- eager rules


VIEWS = {
    "view": lambda t: t.view(6, 4),
    "view_neg": lambda t: t.view(-1),
    "t": lambda t: t.t(),
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.permute(1, 0),
    "select": lambda t: t[1],
    "slice": lambda t: t[1:3],
    "slice_step": lambda t: t[:, ::2],
    "narrow": lambda t: t.narrow(1, 2, 3),
    "expand": lambda t: t[:1].expand(3, 6),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:1].squeeze(0),
    "diagonal": lambda t: t.diagonal(),
    "as_strided": lambda t: t.as_strided((2, 2), (1, 6), 1),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "split": lambda t: t.split(2)[1],
    "chunk": lambda t: t.chunk(3, dim=1)[2],
    "unbind": lambda t: t.unbind(1)[3],
    "reshape": lambda t: t.reshape(3, 8),
    "flatten": lambda t: t.flatten(),
    "movedim": lambda t: t.movedim(0, 1),
    "unflatten": lambda t: t.unflatten(1, (2, 3)),
    "view_as": lambda t: t.view_as(torch.empty(6, 4)),
    "detach": lambda t: t.detach(),
    "alias": lambda t: torch.ops.aten.alias(t),
    "real": lambda t: t.real,
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_of_normal_tensors_in_inference_mode(name):
    """Views of a normal tensor made in inference mode are normal tensors sharing the
    base's version counter; views of those too; in-place writes through them bump it."""
    view = VIEWS[name]

    def program(rec):
        a = rec.move(A)
        w = rec.move(B).requires_grad_()
        with torch.inference_mode():
            v = rec("view", lambda: view(a))
            rec("view of the view", lambda: v.view(-1) if v.is_contiguous() else v.t())
            rec("view of a leaf requiring grad", lambda: view(w))
            rec("in-place through the view", lambda: v.mul_(2))
            rec("base after", lambda: a)
            rec("base's version", lambda: a._version)
        rec("view outside", lambda: v)
        rec("op on the view outside", lambda: v + 1)

    check(program)


# PyTorch's detach() of an inference tensor outside inference mode keeps a version
# counter, which a tensor of ours cannot have (docs/semantics.md); its other rules hold.
@pytest.mark.parametrize("name", sorted(set(VIEWS) - {"detach"}))
def test_views_of_inference_tensors(name):
    """Views of an inference tensor are inference tensors, in inference mode and out."""
    view = VIEWS[name]

    def program(rec):
        with torch.inference_mode():
            i = rec.move(A)
            rec("view inside", lambda: view(i))
        rec("view outside", lambda: view(i))
        rec("op on a view outside", lambda: view(i) * 2)

    check(program)


def test_new_tensors_and_in_place_ops_in_inference_mode():
    def program(rec):
        a = rec.move(A)
        w = rec.move(B).requires_grad_()
        with torch.inference_mode():
            i = rec("moved in", lambda: rec.move(A))
            rec("op on a normal tensor", lambda: a * 2 + 1)
            rec("op on a leaf requiring grad", lambda: w.exp())
            rec("op mixing kinds", lambda: torch.where(a > 0, a, i))
            rec("cat", lambda: torch.cat([a, i]))
            rec("reduction", lambda: a.sum(1))
            rec("in-place on a normal tensor", lambda: a.add_(1))
            rec("again", lambda: a.mul_(i))
            rec("on a leaf requiring grad", lambda: w.add_(1))
            rec("indexed assignment", lambda: a.__setitem__((0, slice(None)), 5.0) or a)
            rec("view then in-place", lambda: a[:, 1].fill_(2.0))
            rec("a", lambda: a)
            rec("in-place on an inference tensor", lambda: i.sub_(a))
            rec("copy_ into a normal tensor", lambda: a.copy_(i))
            rec("zeros(device)", lambda: torch.zeros(2, 3, device=a.device))
            rec("requires_grad_ inside", lambda: rec.move(B).requires_grad_())
            rec("factory_like", lambda: torch.ones_like(a))
            rec("cast", lambda: a.double())
            rec("to the same dtype", lambda: a.to(torch.float32))
            rec("contiguous of a transposed view", lambda: a.t().contiguous())
        rec("a outside", lambda: a)
        rec("i outside", lambda: i)

    check(program)


def test_in_place_view_ops_and_resizes_keep_the_kind():
    """t_, squeeze_, resize_ and out= resizing replace a tensor's metadata (through
    `.data`, which copies the key set): a normal tensor stays normal, an inference one
    an inference tensor."""

    def program(rec):
        a = rec.move(A)
        out = rec.move(torch.zeros(2))
        with torch.inference_mode():
            i = rec.move(A)
            for name, t in (("normal", a), ("inference", i)):
                rec(f"{name}.t_", lambda: t.t_())
                rec(f"{name}.t_ back", lambda: t.t_())
                rec(f"{name}.unsqueeze_", lambda: t.unsqueeze_(0))
                rec(f"{name}.squeeze_", lambda: t.squeeze_(0))
                rec(f"{name}.transpose_", lambda: t.transpose_(0, 1))
                rec(f"{name}.resize_", lambda: t.resize_(2, 10))
                rec(f"{name}.resize_ back", lambda: t.resize_(4, 6))
            rec("out= resized", lambda: torch.add(a, 1, out=out))
        rec("after", lambda: (a, i, out))

    with pytest.warns(UserWarning, match="was resized"):
        check(program)


def test_inference_tensors_outside_inference_mode():
    """PyTorch's rules for inference tensors used afterwards: ops make normal tensors,
    in-place writes and saving for backward are refused, reading them works."""

    def program(rec):
        w = rec.move(B).requires_grad_()
        b = rec.move(B)
        with torch.inference_mode():
            i = rec.move(A)
            made_with_grad = rec.move(B).requires_grad_()
        rec("op", lambda: i * 2)
        rec("op with a tensor requiring grad", lambda: i + w)
        rec("saved for backward", lambda: i * w)
        rec("stack saved for backward", lambda: torch.stack([w, i]).sin())
        rec("in-place op", lambda: i.add_(1))
        rec("in-place through a view", lambda: i[0].zero_())
        rec("copy_ into", lambda: i.copy_(b))
        rec("out= into", lambda: torch.add(b, b, out=i))
        rec("in-place view op", lambda: i.t_())
        rec("in-place saving it", lambda: (w * 1).mul_(i))
        rec("requires_grad_", lambda: i.requires_grad_())
        rec("values", lambda: i)
        # (PyTorch CPU's clone of an inference tensor outside inference mode comes with
        # _version 1, from the copy_ inside its kernel: not compared, docs/semantics.md)
        rec("clone", lambda: (i.clone().is_inference(), host(i.clone())))
        rec("clone in-place", lambda: i.clone().add_(1).is_inference())
        rec("tolist", lambda: i.tolist())
        rec("item", lambda: i[1, 2].item())
        rec("made with requires_grad", lambda: made_with_grad)
        rec("backward through an inference leaf requiring grad", lambda: (made_with_grad + w).sum().backward())
        rec("its grad", lambda: made_with_grad.grad)

    check(program)


def test_views_we_make_as_new_tensors_take_their_base_kind():
    """view_as_real and view_as_complex are views here too, and conj is a view in PyTorch
    and a new tensor here (docs/semantics.md, Aliasing): under inference mode they come
    back as what PyTorch's view of a normal tensor is, with its version counter."""

    def program(rec):
        a = rec.move(A)
        c = rec.move(torch.randn(3, dtype=torch.complex64))
        with torch.inference_mode():
            rec("view_as_complex", lambda: torch.view_as_complex(a.view(4, 3, 2)))
            rec("view_as_real", lambda: torch.view_as_real(c))
            rec("conj's kind", lambda: c.conj().is_inference())
            rec("in-place on a bumps its views' version", lambda: a.add_(1)._version)
        rec("view_as_real outside", lambda: torch.view_as_real(c))

    check(program)


def test_composite_operators_run_pytorchs_eager_kernels():
    """Under inference mode CompositeImplicitAutograd operators reach the backend and
    run PyTorch's C++ kernel, as on the CPU: dropout in eval returns its input itself,
    interpolate lowers to upsample kernels."""
    x = xnf.to_xla(A)
    images = torch.randn(1, 2, 4, 4)
    with torch.inference_mode():
        assert torch.nn.functional.dropout(x, 0.5, training=False) is x
        up = torch.nn.functional.interpolate(xnf.to_xla(images), scale_factor=2, mode="bilinear")
        expected = torch.nn.functional.interpolate(images, scale_factor=2, mode="bilinear")
    assert up.is_inference() and expected.is_inference()
    torch.testing.assert_close(xnf.to_torch(up), expected)


def test_reading_printing_and_saving_inference_tensors():
    with torch.inference_mode():
        ours = xnf.to_xla(A)
        assert ours.is_inference()
        inside = repr(ours)
    outside = repr(ours)
    assert str(A).split("(")[1].split(")")[0] in inside and "device='jax:0'" in inside and inside == outside
    back = xnf.to_torch(ours)
    assert torch.equal(back, A) and not back.is_inference()
    assert ours.tolist() == A.tolist() and torch.equal(torch.from_numpy(ours.numpy()), A)
    buffer = io.BytesIO()
    torch.save({"t": ours}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["t"]
    assert torch.equal(loaded, A) and loaded.device.type == "cpu"


def test_autograd_and_views_made_in_inference_mode():
    """A view of a tensor requiring grad made in inference mode cannot be written in
    place outside it; a base written after such a view was made breaks the view's
    grad_fn; a saved tensor written in place in inference mode fails backward."""

    def program(rec):
        w = rec.move(B).requires_grad_()
        s = w * 1  # not a leaf
        with torch.inference_mode():
            v = rec("view made inside", lambda: s.view(-1))
            r = rec("reshape made inside", lambda: s.reshape(-1))
            plain = rec("view of a tensor not requiring grad", lambda: rec.move(A)[0])
        rec("in-place on the view outside", lambda: v.add_(1))
        rec("in-place on the reshape outside", lambda: r.add_(1))
        rec("in-place on the plain view", lambda: plain.add_(1))
        rec("base written", lambda: s.mul_(2))
        rec("view's grad_fn", lambda: v.grad_fn)
        a = w.clone()
        out = a * a
        with torch.inference_mode():
            rec("in-place on a saved tensor", lambda: a.mul_(1))
        rec("backward", lambda: out.sum().backward())

    check(program)


def test_data_assignment_keeps_the_kind():
    """`.data =` copies the key set, which PyTorch refuses to change on a device like
    ours: a normal tensor assigned an inference tensor's data stays normal (on CPU it
    would become an inference tensor, docs/semantics.md) and shares the data."""
    normal = xnf.to_xla(torch.zeros(4, 6))
    with torch.inference_mode():
        normal.data = xnf.to_xla(A)
        assert not normal.is_inference()
        torch.testing.assert_close(xnf.to_torch(normal), A)
        inference = xnf.to_xla(torch.zeros(3))
    inference.data = xnf.to_xla(B)
    assert inference.is_inference() and torch.equal(xnf.to_torch(inference), B)



def test_lazy_module_materialized_in_inference_mode():
    """A moved lazy module's first forward under inference mode materializes its
    parameters through `.data =` on a placeholder (core/uninitialized.py): the output
    matches PyTorch CPU's, an inference tensor; the parameters stay normal tensors
    (PyTorch CPU's become inference tensors, docs/semantics.md), so training later works."""
    torch.manual_seed(0)
    cpu = nn.LazyLinear(4)
    ours = xnf.to_xla(nn.LazyLinear(4))
    x = torch.randn(2, 3)
    with torch.inference_mode():
        expected = cpu(x)
        got = ours(xnf.to_xla(x))
    assert got.is_inference() and expected.is_inference() and tuple(ours.weight.shape) == (4, 3)
    assert isinstance(ours.weight, nn.Parameter) and not ours.weight.is_inference() and ours.weight.requires_grad
    with torch.no_grad():
        ours.weight.copy_(xnf.to_xla(cpu.weight.detach()))
        ours.bias.copy_(xnf.to_xla(cpu.bias.detach()))
    with torch.inference_mode():
        got = ours(xnf.to_xla(x))
    torch.testing.assert_close(xnf.to_torch(got), expected)
    ours(xnf.to_xla(x)).sum().backward()
    torch.testing.assert_close(xnf.to_torch(ours.bias.grad), torch.full((4,), 2.0))

# ----------------------------------------------------------------- compile(), lazy_mode(), Dynamo


def step_with_views_and_writes(x, y):
    y.add_(1)
    y[0].mul_(2)
    v = x.t()[1:]
    return v * 2, x.view(-1)[:3].sum(), y, x.reshape(-1) + y.sum()


def run_step(step, make_args, calls, context):
    args = make_args()
    with context():
        for _ in range(calls):
            out = step(*args)
    return args, out


@pytest.mark.parametrize("args_kind", ["normal", "inference"])
def test_compiled_steps_in_inference_mode(args_kind):
    def make(move):
        def make_args():
            if args_kind == "normal":
                return move(A), move(B)
            with torch.inference_mode():
                return move(A), move(B)
        return make_args

    calls = 5  # traced three times, then replayed
    ref_args, ref_out = run_step(step_with_views_and_writes, make(lambda t: t.clone()), calls, torch.inference_mode)
    step = xnf.compile(step_with_views_and_writes)
    args, out = run_step(step, make(xnf.to_xla), calls, torch.inference_mode)
    assert step.signatures and next(iter(step.signatures.values())).plans, "not replayed"
    for i, (r, o) in enumerate(zip(ref_args + ref_out, args + out)):
        r, o = describe(r), describe(o)
        # a replay returns a view of an argument as a tensor on its storage, not an
        # autograd view (docs/semantics.md): compared except for view-ness and _version
        if i == 2:
            r, o = r[:3] + r[5:], o[:3] + o[5:]
        assert_same(r, o, f"output {i}")


def test_compiled_step_traced_in_inference_mode_is_not_replayed_outside():
    step = xnf.compile(lambda x: x.add_(1))
    with torch.inference_mode():
        x = xnf.to_xla(torch.zeros(3))
        for _ in range(4):
            step(x)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        step(x)
    cpu = torch.zeros(3)
    with torch.inference_mode():
        cpu_inf = cpu.clone()
        for _ in range(4):
            cpu_inf.add_(1)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        cpu_inf.add_(1)
    assert torch.equal(xnf.to_torch(x), cpu_inf)  # both wrote, then refused


def test_compiled_training_step_refuses_inference_inputs():
    torch.manual_seed(0)
    model = xnf.to_xla(nn.Linear(4, 2))

    def train(x):
        loss = model(x).square().sum()
        loss.backward()
        return loss.detach()

    step = xnf.compile(train)
    x = xnf.to_xla(torch.randn(3, 4))
    for _ in range(4):
        step(x)
    with torch.inference_mode():
        made_inside_cpu = torch.randn(3, 4)
        made_inside = xnf.to_xla(made_inside_cpu)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward") as on_cpu:
        nn.Linear(4, 2)(made_inside_cpu)
    with pytest.raises(RuntimeError) as ours:
        step(made_inside)  # the same signature but for the argument's kind: traced, and refused
    assert str(ours.value) == str(on_cpu.value)


@pytest.mark.parametrize("context", [torch.inference_mode, torch.no_grad])
def test_replay_bumps_versions_of_what_it_writes(context):
    """A replay writes storages without running the in-place ops: the version counters
    of the tensors it wrote advance by as much as in the trace."""

    def step(x, y):
        x.add_(1)
        y.mul_(2).add_(1)
        z = x * 2
        z.add_(1)
        return z

    step_ours = xnf.compile(step)
    x, y = xnf.to_xla(A), xnf.to_xla(B)
    xc, yc = A.clone(), B.clone()
    with context():
        for _ in range(5):
            z = step_ours(x, y)
            zc = step(xc, yc)
    assert next(iter(step_ours.signatures.values())).plans, "not replayed"
    assert (x._version, y._version) == (xc._version, yc._version) == (5, 10)
    assert z.is_inference() == zc.is_inference() == (context is torch.inference_mode)
    assert version(z) == version(zc)
    torch.testing.assert_close(xnf.to_torch(y), yc)
    torch.testing.assert_close(xnf.to_torch(z), zc)


def test_lazy_mode_in_inference_mode():
    def program(rec):
        a = rec.move(A)
        with torch.inference_mode():
            i = rec.move(B)
            with xnf.lazy_mode() if a.device.type == "jax" else torch.inference_mode():
                v = a.t()
                v.mul_(2)
                r = a.reshape(-1)[2:] + i.view(-1)[:-2]
                j = i.t()
                j.add_(1)
                if a.device.type == "jax":
                    xnf.mark_step()
            rec("view", lambda: v)
            rec("result", lambda: r)
            rec("inference view", lambda: j)
            rec("base", lambda: a)
        rec("base outside", lambda: a)

    check(program)


@pytest.mark.parametrize("args_kind", ["normal", "inference"])
def test_dynamo_backend_in_inference_mode(args_kind):
    def make():
        if args_kind == "normal":
            return A.clone(), B.clone()
        with torch.inference_mode():
            return A.clone(), B.clone()

    # the reference is PyTorch's own torch.compile on the CPU (AOTAutograd decides how
    # a graph's views come back)
    torch._dynamo.reset()
    reference = torch.compile(step_with_views_and_writes, backend="aot_eager", fullgraph=True)
    ref_args, ref_out = run_step(reference, make, 3, torch.inference_mode)
    eager_args, eager_out = run_step(step_with_views_and_writes, make, 3, torch.inference_mode)
    for r, e in zip(ref_args + ref_out, eager_args + eager_out):
        torch.testing.assert_close(r, e)
    torch._dynamo.reset()
    dynamo.reset_dynamo_stats()
    compiled = torch.compile(step_with_views_and_writes, backend="xla_native", fullgraph=True)
    args, out = run_step(compiled, make, 3, torch.inference_mode)
    assert dynamo.stats.graphs >= 1 and dynamo.stats.calls == 3 and not dynamo.stats.split_ops
    for i, (r, o) in enumerate(zip(ref_args + ref_out, args + out)):
        r, o = describe(r), describe(o)
        if i in (1, 4) and args_kind == "normal":
            # the mutated input y (and y returned): the backend writes each mutated
            # input back with one copy_ per call, AOTAutograd's own runtime with one per
            # in-place op: both advance its version counter, by different counts
            assert o[3] >= 3 and r[3] >= 3
            r, o = r[:3] + r[4:], o[:3] + o[4:]
        assert_same(r, o, f"output {i}")


# ----------------------------------------------------------------- modules


def _tiny_bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    return BertModel(config), (torch.randint(0, 50, (2, 7)),), {}


def _tiny_gpt2():
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=32, bos_token_id=0, eos_token_id=0)
    # no key/value cache: a cache object holding tensors is not a value a compile()d
    # step can return and replay
    return GPT2Model(config), (torch.randint(0, 50, (2, 7)),), {"use_cache": False}


def _encoder():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), (torch.randn(2, 5, 8),), {}


MODULES = {
    "Linear": lambda: (nn.Linear(8, 4), (torch.randn(3, 8),), {}),
    "Conv2d": lambda: (nn.Conv2d(3, 4, 3, padding=1), (torch.randn(2, 3, 8, 8),), {}),
    "BatchNorm2d": lambda: (nn.BatchNorm2d(3), (torch.randn(2, 3, 5, 5),), {}),
    "InstanceNorm1d": lambda: (
        nn.InstanceNorm1d(3, affine=True, track_running_stats=True),
        (torch.randn(2, 3, 7),),
        {},
    ),
    "InstanceNorm2d": lambda: (nn.InstanceNorm2d(3), (torch.randn(2, 3, 5, 5),), {}),
    "LayerNorm": lambda: (nn.LayerNorm(8), (torch.randn(3, 8),), {}),
    "Embedding": lambda: (nn.Embedding(10, 4), (torch.tensor([[1, 2, 9], [0, 3, 3]]),), {}),
    "BCELoss": lambda: (nn.BCELoss(), (torch.rand(5), torch.rand(5)), {}),
    "RNN": lambda: (nn.RNN(4, 6, num_layers=2, batch_first=True), (torch.randn(2, 5, 4),), {}),
    "LSTM": lambda: (nn.LSTM(4, 6), (torch.randn(5, 2, 4),), {}),
    "GRU": lambda: (nn.GRU(4, 6, bidirectional=True), (torch.randn(5, 2, 4),), {}),
    "MultiheadAttention": lambda: (
        nn.MultiheadAttention(8, 2, batch_first=True),
        (torch.randn(2, 5, 8),) * 3,
        {"need_weights": True},
    ),
    "TransformerEncoder": _encoder,
    "BertModel": _tiny_bert,
    "GPT2Model": _tiny_gpt2,
}
# Dynamo and lazy_mode() take the same per-op path as eager and compile(): a few
# representative modules are enough there. (Not LSTM through Dynamo: its CPU graph
# calls mkldnn_rnn_layer, which runs on PyTorch CPU with or without inference mode.)
DYNAMO_MODULES = ("Linear", "BatchNorm2d", "GRU", "MultiheadAttention", "TransformerEncoder", "BertModel")
LAZY_MODULES = ("InstanceNorm1d", "BCELoss", "GRU", "MultiheadAttention", "TransformerEncoder", "GPT2Model")


@pytest.fixture
def slow_attention_path():
    # the fused fast path (_native_multi_head_attention) is not what these tests are about
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(enabled)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if hasattr(x, "to_tuple"):  # a transformers ModelOutput
        x = x.to_tuple()
    if isinstance(x, (tuple, list)):
        return [t for e in x for t in _tensors(e)]
    return []


MODULE_CASES = [(name, mode) for name in MODULES for mode in ("eager", "compiled")] + \
    [(name, "lazy") for name in LAZY_MODULES] + [(name, "dynamo") for name in DYNAMO_MODULES]


@pytest.mark.parametrize("name, mode", MODULE_CASES)
def test_module_forward_in_inference_mode(name, mode, slow_attention_path):
    torch.manual_seed(0)
    module, args, kwargs = MODULES[name]()
    module.eval()
    with torch.inference_mode():
        expected = _tensors(module(*args, **kwargs))
    ours = xnf.to_xla(copy.deepcopy(module))
    xargs = xnf.to_xla(args)
    with torch.inference_mode():
        if mode == "eager":
            out = ours(*xargs, **kwargs)
        elif mode == "compiled":
            step = xnf.compile(lambda *a: ours(*a, **kwargs))
            for _ in range(4):  # traced, then replayed
                out = step(*xargs)
            assert next(iter(step.signatures.values())).plans, "not replayed"
        elif mode == "lazy":
            with xnf.lazy_mode():
                out = ours(*xargs, **kwargs)
                xnf.mark_step()
        else:
            torch._dynamo.reset()
            dynamo.reset_dynamo_stats()
            compiled = torch.compile(copy.deepcopy(module), backend="xla_native", fullgraph=name != "BertModel")
            with torch._dynamo.config.patch(allow_rnn=True):  # Dynamo leaves RNN modules to eager otherwise
                for _ in range(2):
                    out = compiled(*args, **kwargs)
            assert dynamo.stats.graphs >= 1 and dynamo.stats.calls >= 2 and not dynamo.stats.split_ops
    got = _tensors(out)
    assert len(got) == len(expected)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g.is_inference() == e.is_inference(), f"output {i}"
        torch.testing.assert_close(host(g), e, rtol=1e-4, atol=1e-5, msg=lambda m: f"output {i}: {m}")
