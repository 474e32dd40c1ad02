"""compile() replays steps of torch.nn modules whose results are views of views
(Note [Views kept by views] in runtime/frontends/replay.py): nn.MultiheadAttention in
train, eval, no_grad and inference_mode, against PyTorch CPU; a view the program keeps
still stops the replay; and a call that enters inference_mode itself returns inference
tensors when replayed, as when traced and as on PyTorch CPU."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.frontends import replay
from xla_native_functions.runtime.platform.metrics import metrics

CALLS = 5  # three traced calls, then replays


pytestmark = pytest.mark.usefixtures("fresh_graph_cache")


def _step(setting):
    """A step as a user writes it: a training or evaluation step with backward, or a
    forward under no_grad / inference_mode."""

    def step(mha, q, kv, mask):
        if setting in ("train", "eval"):
            mha.zero_grad(set_to_none=True)
            out, weights = mha(q, kv, kv, key_padding_mask=mask)
            (out.sum() + (weights * weights).sum()).backward()
            return out, weights  # a replay returns them detached
        with torch.no_grad() if setting == "no_grad" else torch.inference_mode():
            return mha(q, kv, kv, key_padding_mask=mask)

    return step


# The module_db samples: unbatched (L, E) inputs; and batch_first, whose results are
# transposed views of reshaped ones.
SHAPES = {"unbatched": ((3, 4), (5, 4), (5,)), "batch_first": ((2, 3, 4), (2, 5, 4), (2, 5))}


@pytest.mark.parametrize("layout", sorted(SHAPES))
@pytest.mark.parametrize("setting", ["train", "eval", "no_grad", "inference_mode"])
def test_multihead_attention_step_is_replayed_and_matches_cpu(setting, layout):
    q_shape, kv_shape, mask_shape = SHAPES[layout]
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(4, 2, batch_first=layout == "batch_first").train(setting == "train")
    ours = xnf.to_xla(copy.deepcopy(ref))
    q, kv = torch.randn(q_shape), torch.randn(kv_shape)
    mask = torch.zeros(mask_shape, dtype=torch.bool)
    mask[..., -1] = True
    step = _step(setting)
    compiled = xnf.compile(step)
    oq, okv, omask = xnf.to_xla((q, kv, mask))
    for _ in range(CALLS):
        got = compiled(ours, oq, okv, omask)
        expected = step(ref, q, kv, mask)
        for g, e in zip(got, expected):
            assert g.is_inference() == e.is_inference()
            torch.testing.assert_close(xnf.to_torch(g.detach()), e.detach(), atol=1e-5, rtol=1e-5)
        if setting in ("train", "eval"):
            for (name, p), ref_p in zip(ours.named_parameters(), ref.parameters()):
                torch.testing.assert_close(xnf.to_torch(p.grad), ref_p.grad, atol=1e-5, rtol=1e-5, msg=name)
    assert metrics.replays == CALLS - 3, xnf.metrics_report()


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x * 2).view(3, 1, 4).squeeze(1),
        lambda x: (x * 2).unsqueeze(0).transpose(1, 2).reshape(4, 3).t(),
        lambda x: ((x + 1).view(12)[2:10].view(2, 4), (x - 1).unflatten(1, (2, 2)).permute(2, 0, 1)),
    ],
    ids=["view-squeeze", "chain-of-four", "two-results"],
)
def test_view_of_a_view_of_a_result_is_replayed(fn):
    compiled = xnf.compile(fn)
    torch.manual_seed(0)
    for _ in range(CALLS):
        x = torch.randn(3, 4)
        got, expected = compiled(xnf.to_xla(x)), fn(x)
        for g, e in zip(*(((got,), (expected,)) if isinstance(expected, torch.Tensor) else (got, expected))):
            assert g.shape == e.shape and g.stride() == e.stride()
            torch.testing.assert_close(xnf.to_torch(g), e)
    assert metrics.replays == CALLS - 2, xnf.metrics_report()


@pytest.mark.parametrize("where", ["list", "attribute"])
def test_view_kept_by_the_program_still_stops_the_replay(where):
    """The intermediate view is held by the returned view's metadata and by the
    program: a replay would not update the kept one."""
    kept = []

    class Holder:
        pass

    holder = Holder()

    def fn(x):
        y = (x * 2).view(3, 1, 4)
        if where == "list":
            kept.append(y)
        else:
            holder.y = y
        return y.squeeze(1)

    compiled = xnf.compile(fn)
    for k in range(replay.MAX_PROBES + 1):  # after MAX_PROBES traces, the note says why
        x = torch.full((3, 4), float(k))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", replay.ReplayWarning)
            compiled(xnf.to_xla(x))
        last = kept[-1] if where == "list" else holder.y
        torch.testing.assert_close(xnf.to_torch(last), (x * 2).view(3, 1, 4))
    assert metrics.replays == 0
    assert any("keeps a tensor it made" in note for note in metrics.replay_notes), metrics.replay_notes


def test_call_entering_inference_mode_returns_inference_tensors_when_replayed():
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 3).eval()
    ours = xnf.to_xla(copy.deepcopy(ref))

    def infer(model, x):
        with torch.inference_mode():
            return model(x).relu()

    compiled = xnf.compile(infer)
    x = torch.randn(2, 4)
    ox = xnf.to_xla(x)
    expected = infer(ref, x)
    assert expected.is_inference()
    for _ in range(CALLS):
        got = compiled(ours, ox)
        assert got.is_inference(), "a result made under inference_mode is an inference tensor"
        torch.testing.assert_close(xnf.to_torch(got), expected)
        # as on PyTorch CPU, writing to it outside inference_mode is refused
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
            got.add_(1)
    assert metrics.replays == CALLS - 3, xnf.metrics_report()


@torch.library.custom_op("replay_modules_test::project", mutates_args=())
def _project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w.t()  # a view of the parameter made below autograd: it has no _base


@_project.register_fake
def _(x, w):
    return x.new_empty(x.shape[0], w.shape[0])


def test_parameter_read_only_inside_a_custom_op_is_replayed():
    """nn.LinearCrossEntropyLoss's chunked path is a torch.library custom op that reads
    the linear weight through its own views: the replay reads the parameter itself."""
    torch.manual_seed(0)
    ref = torch.nn.Linear(5, 4)
    ours = xnf.to_xla(copy.deepcopy(ref))

    def step(module):
        def fn(x):
            with torch.no_grad():
                return _project(x, module.weight.reshape(4, 5))
        return fn

    compiled, expected = xnf.compile(step(ours)), step(ref)
    for _ in range(CALLS):
        x = torch.randn(8, 5)
        torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(x))), expected(x))
    assert metrics.replays == CALLS - 2, xnf.metrics_report()
    with torch.no_grad():  # a new value of the parameter reaches the replay
        ours.weight.mul_(2)
        ref.weight.mul_(2)
    x = torch.randn(8, 5)
    torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(x))), expected(x))
    assert metrics.replays == CALLS - 1


@pytest.mark.parametrize("detached", [False, True])
def test_loss_whose_autograd_graph_keeps_tensors_replays_when_returned_detached(detached):
    """LinearCrossEntropyLoss with allow_retain_graph keeps tensors of the call in its
    autograd node: returned with its graph after backward(), the loss holds them, which
    a replay cannot rebuild (module_db's samples with these options); returned detached,
    it replays."""
    torch.manual_seed(0)
    options = torch.nn.LinearCrossEntropyOptions(allow_retain_graph=True)
    ref = torch.nn.LinearCrossEntropyLoss(6, 4, options=options)
    ours = xnf.to_xla(copy.deepcopy(ref))
    x, target = torch.randn(5, 6), torch.randint(0, 4, (5,))

    def step_of(module):
        def step(x, target):
            module.zero_grad(set_to_none=True)
            loss = module(x, target)
            loss.backward()
            return loss.detach() if detached else loss
        return step

    ref_step, step = step_of(ref), xnf.compile(step_of(ours))
    for _ in range(replay.MAX_PROBES + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", replay.ReplayWarning)
            loss = step(xnf.to_xla(x), xnf.to_xla(target))
        torch.testing.assert_close(xnf.to_torch(loss.detach()), ref_step(x, target).detach())
        torch.testing.assert_close(xnf.to_torch(ours.linear.weight.grad), ref.linear.weight.grad)
    if detached:  # the first call traced, the second confirms
        assert metrics.replays == replay.MAX_PROBES + 1 - 2, xnf.metrics_report()
    else:
        assert metrics.replays == 0 and metrics.replay_notes
