"""compile()'s replay (Note [Replay] in runtime/frontends/replay.py) against PyTorch CPU: stable
steps run without their Python, and everything a replay could get wrong either guards
the replay or keeps the function traced on every call."""

from __future__ import annotations

import collections
import copy
import gc
import warnings

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.exec import first_call, graph
from xla_native_functions.runtime.platform.metrics import metrics
from xla_native_functions.runtime.frontends.replay import ReplayWarning

STEPS = 8


def cpu(t):
    return xnf.to_torch(t)


pytestmark = pytest.mark.usefixtures("fresh_graph_cache")


def _mlp(dropout: float = 0.0):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(12, 3)
    )


def _pair(make_opt, **model_kwargs):
    """The same model and optimizer on PyTorch CPU and moved to our device;
    make_opt(params, ours)."""
    ref = _mlp(**model_kwargs)
    ours = xnf.to_xla(copy.deepcopy(ref))
    return ref, make_opt(ref.parameters(), False), ours, make_opt(ours.parameters(), True)


def _train_step(model, opt, detach=True):
    def step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach() if detach else loss

    return step


def _batches(n=STEPS):
    torch.manual_seed(1)
    return [(torch.randn(4, 6), torch.randn(4, 3)) for _ in range(n)]


def _assert_same_weights(ours, ref):
    for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(p), q, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("make_opt", [
    lambda ps, ours: torch.optim.SGD(ps, lr=0.1),
    lambda ps, ours: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    lambda ps, ours: torch.optim.AdamW(ps, lr=0.01, capturable=ours),
], ids=["sgd", "sgd-momentum", "adamw-capturable"])
def test_training_step_is_replayed_and_matches_cpu(make_opt):
    ref, ref_opt, ours, opt = _pair(make_opt)
    ref_step, step = _train_step(ref, ref_opt), xnf.compile(_train_step(ours, opt))
    for x, y in _batches():
        torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y), atol=1e-5, rtol=1e-5)
    _assert_same_weights(ours, ref)
    for p, q in zip(ours.parameters(), ref.parameters()):  # the .grad of the last step
        torch.testing.assert_close(cpu(p.grad), q.grad, atol=1e-5, rtol=1e-5)
    # Step 1 creates the optimizer state; steps 2 and 3 trace the same plan; the rest replay.
    assert metrics.replays == STEPS - 3, xnf.metrics_report()
    assert metrics.compile_count <= 2


def test_default_adamw_is_traced_every_call_and_matches_cpu():
    """Default AdamW increments a CPU step counter and reads it with .item(): a replay
    would freeze it, so the function stays traced, and says why."""
    ref, ref_opt, ours, opt = _pair(lambda ps, ours: torch.optim.AdamW(ps, lr=0.01))
    ref_step, step = _train_step(ref, ref_opt), xnf.compile(_train_step(ours, opt))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in _batches():
            torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y), atol=1e-5, rtol=1e-5)
    _assert_same_weights(ours, ref)
    assert metrics.replays == 0
    assert any("CPU tensor" in n and "capturable=True" in n for n in metrics.replay_notes), metrics.replay_notes
    # Said once, at the caller's line, with the fix.
    replay_warnings = [w for w in caught if issubclass(w.category, ReplayWarning)]
    assert len(replay_warnings) == 1 and "capturable=True" in str(replay_warnings[0].message)
    assert replay_warnings[0].filename == __file__


def test_model_left_on_the_cpu_says_so_and_how_to_move_it():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    step = xnf.compile(model)
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(step(x), model(x))
    message = str(next(w for w in caught if issubclass(w.category, ReplayWarning)).message)
    assert "a tensor on cpu" in message and "to_xla(tensor)" in message and "to_xla(model)" in message, message


def test_learning_rate_change_is_seen():
    ref, ref_opt, ours, opt = _pair(lambda ps, ours: torch.optim.SGD(ps, lr=0.1))
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=5, gamma=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.1)
    ref_step, step = _train_step(ref, ref_opt), xnf.compile(_train_step(ours, opt))
    for x, y in _batches(12):
        step(xnf.to_xla(x), xnf.to_xla(y))
        ref_step(x, y)
        sched.step()
        ref_sched.step()
    _assert_same_weights(ours, ref)
    assert metrics.replays > 0


def test_learning_rate_changed_every_call_is_traced_and_the_note_gives_the_fix():
    ref, ref_opt, ours, opt = _pair(lambda ps, ours: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
    ref_sched = torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, T_max=20)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    ref_step, step = _train_step(ref, ref_opt), xnf.compile(_train_step(ours, opt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x, y in _batches(10):
            torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y), atol=1e-5, rtol=1e-5)
            sched.step()
            ref_sched.step()
    _assert_same_weights(ours, ref)
    assert metrics.replays == 0
    (note,) = metrics.replay_notes
    assert "learning-rate scheduler" in note and "lr=torch.tensor(1e-3, device='jax'), capturable=True" in note, note


def test_step_that_settles_after_its_probes_ran_out_is_replayed_later():
    """A learning rate warmed up over the first 10 calls, then held: the probes run out
    during the warmup, and a later pair of probes confirms the settled step (Note
    [Probing again])."""
    from xla_native_functions.runtime.frontends import replay

    ref, ref_opt, ours, opt = _pair(lambda ps, ours: torch.optim.SGD(ps, lr=0.1))
    warmup = 10

    def set_lr(o, k):
        for g in o.param_groups:
            g["lr"] = 0.1 * min(k + 1, warmup) / warmup

    ref_step, step = _train_step(ref, ref_opt), xnf.compile(_train_step(ours, opt))
    calls = warmup + replay.MAX_PROBES + replay.PROBE_AGAIN_AFTER + 8
    replayed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, (x, y) in enumerate(_batches(calls)):
            set_lr(opt, k)
            set_lr(ref_opt, k)
            before = metrics.replays
            torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y), atol=1e-5, rtol=1e-5)
            replayed.append(metrics.replays > before)
    _assert_same_weights(ours, ref)
    assert not any(replayed[:warmup + replay.MAX_PROBES]) and all(replayed[-6:]), replayed


def test_tensor_learning_rate_on_our_device_replays_under_a_scheduler():
    """The fix the note gives: a scheduler updates a tensor learning rate in place
    (fill_ with a 0-dim tensor), which the replay reads like any other tensor."""

    def adamw(ps, ours):
        lr = torch.tensor(0.01, device="jax") if ours else 0.01  # the same schedule either way
        return torch.optim.AdamW(ps, lr=lr, capturable=ours)

    ref, ref_opt, ours, opt = _pair(adamw)
    ref_sched = torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, T_max=20)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    ref_step, step = _train_step(ref, ref_opt), xnf.compile(_train_step(ours, opt))
    for x, y in _batches(10):
        torch.testing.assert_close(cpu(step(xnf.to_xla(x), xnf.to_xla(y))), ref_step(x, y), atol=1e-5, rtol=1e-5)
        sched.step()
        ref_sched.step()
        torch.testing.assert_close(cpu(opt.param_groups[0]["lr"]), torch.tensor(ref_opt.param_groups[0]["lr"]))
    _assert_same_weights(ours, ref)
    assert metrics.replays == 7, xnf.metrics_report()


def test_train_and_eval_modes_are_guarded():
    ref, ours = _mlp(dropout=0.5), xnf.to_xla(_mlp(dropout=0.5))

    @xnf.compile
    def infer(x):
        with torch.no_grad():
            return ours(x)

    x = torch.randn(64, 6)
    ours.eval()
    ref.eval()
    for _ in range(4):
        torch.testing.assert_close(cpu(infer(xnf.to_xla(x))), ref(x), atol=1e-5, rtol=1e-5)
    ours.train()
    dropped = [cpu(infer(xnf.to_xla(x))) for _ in range(5)]
    # in train mode dropout is live again, and every call draws new numbers
    assert not torch.allclose(dropped[0], ref(x))
    assert not torch.equal(dropped[-1], dropped[-2])
    assert metrics.replays > 0


def test_default_dtype_is_part_of_the_signature():
    """The call's factories and Python floats take the default dtype when traced: a
    replay after torch.set_default_dtype(torch.float64) returned float32."""
    x = xnf.to_xla(torch.ones(3))
    step = xnf.compile(lambda a: torch.ones(3, device=a.device) * a + torch.arange(3.0, device=a.device) / 3)
    try:
        for _ in range(4):  # alternating: each default replays its own program
            torch.set_default_dtype(torch.float64)
            expected = torch.ones(3) * torch.ones(3) + torch.arange(3.0) / 3
            got = step(x)
            assert got.dtype == expected.dtype == torch.float64
            torch.testing.assert_close(cpu(got), expected, rtol=0, atol=0)
            torch.set_default_dtype(torch.float32)
            assert step(x).dtype == torch.float32
    finally:
        torch.set_default_dtype(torch.float32)
    assert metrics.replays > 0


def test_random_numbers_are_fresh_every_replay_and_seeded():
    model = xnf.to_xla(_mlp(dropout=0.5))

    def run():
        f = xnf.compile(lambda x: model(x).detach())
        x = xnf.to_xla(torch.ones(8, 6))
        torch.manual_seed(123)
        return [cpu(f(x)) for _ in range(6)]

    first, second = run(), run()
    assert metrics.replays > 0
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b)
    assert all(not torch.equal(a, b) for a, b in zip(first, first[1:]))


def test_host_read_becomes_a_guard():
    """`.item()` cuts the trace; the value read guards the replay of the rest."""

    @xnf.compile
    def f(x):
        if x.sum().item() > 0:
            return x * 2
        return x - 100

    for sign in (1, 1, 1, 1, 1, -1, 1, -1, -1, -1, -1, -1):
        x = torch.full((3,), 1.0) * sign
        torch.testing.assert_close(cpu(f(xnf.to_xla(x))), x * 2 if sign > 0 else x - 100)
    assert metrics.replays > 0


def test_value_read_inside_the_step_that_changes_every_call_is_traced_and_says_why():
    @xnf.compile
    def step(x):
        return (x * 2).sum().item()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(8):
            assert step(xnf.to_xla(torch.full((3,), float(k)))) == 6.0 * k
    assert metrics.replays == 0
    (note,) = metrics.replay_notes
    assert "values it reads on the host changed" in note and "call .item() after the call" in note, note


def test_each_path_of_host_reads_keeps_its_plan():
    """A loop whose trip count a host read decides (a generation loop's stopping check):
    each path confirmed by two consecutive traces keeps its plan, and calls alternating
    between the paths all replay (Note [Paths of a call])."""

    def grow(x):
        steps = 0
        while x.sum() < 10 and steps < 5:
            x = x * 2 + 1
            steps += 1
        return x, steps

    f = xnf.compile(grow)
    starts = [torch.full((3,), v) for v in (0.0, 2.0, 5.0)]  # 3, 1 and 0 steps
    order = [0, 0, 1, 1, 2, 2] + [0, 1, 2] * 3
    replayed = []
    for i in order:
        before = metrics.replays
        out, steps = f(xnf.to_xla(starts[i]))
        ref, ref_steps = grow(starts[i])
        torch.testing.assert_close(cpu(out), ref)
        assert steps == ref_steps
        replayed.append(metrics.replays > before)
    assert replayed == [False] * 6 + [True] * 9, replayed
    (entry,) = f.signatures.values()
    assert len(entry.plans) == 3


def test_paths_alternating_from_the_start_are_traced():
    """Two paths that never repeat consecutively are never confirmed: a path seen again
    after another call could differ by Python state no guard covers."""
    flips = [0]

    def step(x):
        flips[0] += 1
        return x * 2 if flips[0] % 2 else x - 1  # decided by a counter, not by a host read

    f = xnf.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(10):
            x = torch.full((3,), float(k))
            expected = x * 2 if (flips[0] + 1) % 2 else x - 1
            torch.testing.assert_close(cpu(f(xnf.to_xla(x))), expected)
    assert metrics.replays == 0


def test_data_dependent_shape_is_guarded():
    @xnf.compile
    def f(x):
        return (x[x > 0] * 3).sum()

    for values in ([1.0, -1.0, 2.0],) * 4 + ([1.0, 5.0, 2.0], [-1.0, -1.0, 2.0]):
        x = torch.tensor(values)
        torch.testing.assert_close(cpu(f(xnf.to_xla(x))), (x[x > 0] * 3).sum())


def test_tensor_kept_in_a_list_is_not_replayed():
    # a module attribute holding the tensor is set again by each replay
    # (tests/test_replay_state.py); a list is not
    class Running(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.history = []

        def forward(self, x):
            self.history.append(x * 2)  # state a replay would not update
            return self.history[-1].sum()

    m = Running()
    f = xnf.compile(m)
    for i in range(6):
        x = torch.full((2,), float(i))
        torch.testing.assert_close(cpu(f(xnf.to_xla(x))), (x * 2).sum())
        torch.testing.assert_close(cpu(m.history[-1]), x * 2)
    assert len(m.history) == 6
    assert metrics.replays == 0
    assert any("keeps a tensor" in n for n in metrics.replay_notes), metrics.replay_notes


def test_result_that_requires_grad_without_backward_is_not_replayed():
    model = xnf.to_xla(_mlp())
    f = xnf.compile(lambda x: model(x).sum())
    for _ in range(5):
        out = f(xnf.to_xla(torch.randn(2, 6)))
        assert out.requires_grad and out.grad_fn is not None
    assert metrics.replays == 0


def test_argument_written_in_place_and_returned():
    @xnf.compile
    def bump(x, by):
        x.add_(by)
        return x

    x = xnf.to_xla(torch.zeros(3))
    for i in range(6):
        assert bump(x, 1.0) is x
    view = xnf.to_xla(torch.zeros(2, 3))
    for i in range(5):
        bump(view[1], 2.0)  # a write through a view lands in the base
    torch.testing.assert_close(cpu(x), torch.full((3,), 6.0))
    torch.testing.assert_close(cpu(view), torch.tensor([[0.0] * 3, [10.0] * 3]))
    assert metrics.replays > 0


def test_new_python_argument_is_a_new_signature():
    @xnf.compile
    def scale(x, k):
        return x * k

    x = torch.arange(3.0)
    for k in (2.0, 2.0, 2.0, 2.0, 3.0, 2.0, 5):
        torch.testing.assert_close(cpu(scale(xnf.to_xla(x), k)), x * k)


def test_whole_and_partial_storages_of_the_same_layout_are_keyed_apart():
    # The same size, stride and offset, but the second tensor is the start of a longer
    # storage: its graph input is the whole storage, of another shape.
    @xnf.compile
    def double(x):
        return x * 2

    whole, longer = torch.arange(4.0), torch.arange(6.0)
    for x, ref in [(whole, whole)] * 4 + [(longer, longer[:4])] * 4 + [(whole, whole)]:
        ours = xnf.to_xla(x)
        if x is longer:
            ours = ours[:4]
        torch.testing.assert_close(cpu(double(ours)), ref * 2)
    assert len(double.signatures) == 2 and all(entry.plans for entry in double.signatures.values())


def test_argument_aliasing_a_captured_tensor_is_guarded():
    w = xnf.to_xla(torch.ones(3))

    @xnf.compile
    def f(x):
        w.add_(1)
        return x * 1

    other = xnf.to_xla(torch.zeros(3))
    for _ in range(4):
        f(other)
    torch.testing.assert_close(cpu(f(w)), torch.full((3,), 6.0))  # reads w after its own write
    torch.testing.assert_close(cpu(w), torch.full((3,), 6.0))


def test_gradient_accumulation_across_replays():
    ref, ref_opt, ours, opt = _pair(lambda ps, ours: torch.optim.SGD(ps, lr=0.1))

    def accumulate(model):
        def step(x, y):
            torch.nn.functional.mse_loss(model(x), y).backward()
        return step

    step, ref_step = xnf.compile(accumulate(ours)), accumulate(ref)
    for x, y in _batches(6):
        step(xnf.to_xla(x), xnf.to_xla(y))
        ref_step(x, y)
    for p, q in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(cpu(p.grad), q.grad, atol=1e-5, rtol=1e-5)
    assert metrics.replays > 0


def test_replay_false_traces_every_call():
    f = xnf.compile(lambda x: x + 1, replay=False)
    for _ in range(5):
        f(xnf.to_xla(torch.zeros(2)))
    assert metrics.replays == 0
    assert metrics.cache_hits == 4


def test_value_read_after_the_last_graph_is_guarded():
    scale = xnf.to_xla(torch.tensor(2.0))

    @xnf.compile
    def f(x):
        y = x * 3
        return y, scale.item()  # a host read of an input, after the graph

    for value in (2.0, 2.0, 2.0, 2.0, 5.0, 5.0):
        scale.fill_(value)
        y, s = f(xnf.to_xla(torch.ones(2)))
        assert s == value
        torch.testing.assert_close(cpu(y), torch.full((2,), 3.0))
    assert metrics.replays > 0


def test_training_step_returning_the_loss_is_replayed_detached():
    """`return loss` after loss.backward(): the loss's graph is spent, so replays return
    it detached."""
    ref, ref_opt, ours, opt = _pair(lambda ps, ours: torch.optim.SGD(ps, lr=0.1))

    step, ref_step = xnf.compile(_train_step(ours, opt, detach=False)), _train_step(ref, ref_opt, detach=False)
    for x, y in _batches():
        loss = step(xnf.to_xla(x), xnf.to_xla(y))
        torch.testing.assert_close(cpu(loss.detach()), ref_step(x, y).detach(), atol=1e-5, rtol=1e-5)
    assert not loss.requires_grad
    _assert_same_weights(ours, ref)
    assert metrics.replays == STEPS - 3


def test_nested_arguments_are_replayed_and_keyed_by_structure():
    # Plain tuples, lists and dicts are flattened without torch's pytree; a named tuple
    # goes through it. Either way the structure is part of the signature.
    Pair = collections.namedtuple("Pair", "a b")

    @xnf.compile
    def combine(pair, extra, *, scale):
        return pair[0] * scale["k"] + pair[1] - extra[0]

    a, b, c = torch.arange(3.0), torch.ones(3), torch.full((3,), 0.5)
    xa, xb, xc = (xnf.to_xla(t) for t in (a, b, c))
    for args in [((xa, xb), [xc])] * 5 + [(Pair(xa, xb), [xc])] * 5 + [((xa, xb), (xc,))] * 5:
        out = combine(*args, scale={"k": xb * 2})
        torch.testing.assert_close(cpu(out), a * 2 + b - c)
    assert len(combine.signatures) == 3
    assert all(entry.plans for entry in combine.signatures.values())


def _linear_stack(d_in=512, hidden=512):
    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


@pytest.mark.parametrize("batch, copied", [(16, True), (1, False), (128, False)])
def test_inference_weights_multiplied_transposed_by_few_rows_are_passed_as_copies(batch, copied):
    """Note [Transposed weights]: the first layer's 512x512 weight, read only as the
    right operand of addmm, goes in transposed for 2 to 64 rows; the last (10x512) is
    too small to gain. Results match PyTorch before and after an eager write to the
    weight, which replaces its array and so its copy."""
    ref = _linear_stack()
    ours = xnf.to_xla(copy.deepcopy(ref))
    forward = xnf.compile(lambda x: ours(x))
    x = torch.randn(batch, 512)
    with torch.no_grad():
        for _ in range(5):
            torch.testing.assert_close(cpu(forward(xnf.to_xla(x))), ref(x), atol=1e-5, rtol=1e-5)
        # first calls interpreted (config.first_calls_on_cpu) read the weight untransposed:
        # the executable, once compiled, takes the copy
        assert first_call.wait_for_background_compiles(timeout=300)
        torch.testing.assert_close(cpu(forward(xnf.to_xla(x))), ref(x), atol=1e-5, rtol=1e-5)
        first, last = (id(m.weight._store.array) for m in (ours[0], ours[2]))
        assert (first in graph._TRANSPOSED_COPIES) is copied
        assert last not in graph._TRANSPOSED_COPIES
        ours[0].weight.mul_(-2.0)
        ref[0].weight.mul_(-2.0)
        for _ in range(3):
            torch.testing.assert_close(cpu(forward(xnf.to_xla(x))), ref(x), atol=1e-5, rtol=1e-5)
        assert (id(ours[0].weight._store.array) in graph._TRANSPOSED_COPIES) is copied
    assert metrics.replays > 0
    del forward
    ours = None
    gc.collect()
    assert not graph._TRANSPOSED_COPIES  # each copy is dropped with the array it copies


def test_weights_also_read_untransposed_or_written_are_passed_as_they_are(monkeypatch):
    ref = _linear_stack()
    ours = xnf.to_xla(copy.deepcopy(ref))
    opt, ref_opt = torch.optim.SGD(ours.parameters(), lr=0.01), torch.optim.SGD(ref.parameters(), lr=0.01)
    x, y = torch.randn(16, 512), torch.randn(16, 10)

    def step(model, optimizer, x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    compiled = xnf.compile(lambda x, y: step(ours, opt, x, y))
    read_twice = xnf.compile(lambda x: x @ ours[0].weight.t() + ours[0].weight.sum())

    def then_written(model, x):
        out = x @ model[0].weight.t()
        model[0].weight.copy_(x[:1].expand_as(model[0].weight))  # a write that does not read it
        return out

    ref_written = _linear_stack()
    ours_written = xnf.to_xla(copy.deepcopy(ref_written))
    compiled_then_written = xnf.compile(lambda x: then_written(ours_written, x))
    for _ in range(5):
        torch.testing.assert_close(cpu(compiled(xnf.to_xla(x), xnf.to_xla(y))), step(ref, ref_opt, x, y))
        with torch.no_grad():
            torch.testing.assert_close(cpu(read_twice(xnf.to_xla(x))), x @ ref[0].weight.t() + ref[0].weight.sum(),
                                       atol=1e-4, rtol=1e-5)
            torch.testing.assert_close(cpu(compiled_then_written(xnf.to_xla(x))), then_written(ref_written, x),
                                       atol=1e-5, rtol=1e-5)
    _assert_same_weights(ours, ref)
    assert not graph._TRANSPOSED_COPIES

    monkeypatch.setattr(xnf.config, "transposed_weight_copies", False)
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    inference = xnf.compile(lambda x: ours(x))
    with torch.no_grad():
        torch.testing.assert_close(cpu(inference(xnf.to_xla(x))), ref(x), atol=1e-5, rtol=1e-5)
    assert not graph._TRANSPOSED_COPIES
