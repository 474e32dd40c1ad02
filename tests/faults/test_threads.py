"""Threads and traces (Note [Per-thread trace] in runtime/core/context.py): a thread inside
compile() or lazy_mode() records only its own ops, another thread's ops run eagerly and
stay readable whatever happens to the trace, two threads' compiled steps on their own
models compute what each computes alone, a trace reads a tensor another thread's trace
holds as it was before that trace (so threads can serve one compiled model), and a
write to it is refused with a clear error. Interleavings are forced with events; every
wait has a timeout, so a deadlock fails the test instead of hanging it."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

import xla_native_functions as xnf
from training_steps import batchnorm_mlp, training_step
from xla_native_functions.runtime.core.context import context
from xla_native_functions.runtime.platform.metrics import metrics

TIMEOUT = 120


def cpu(t):
    return xnf.to_torch(t)


class Interrupt(BaseException):
    pass


def run_threads(*fns):
    """Run each function in its own thread; re-raise the first error, fail on a hang."""
    errors: list[BaseException] = []

    def wrap(fn):
        def body():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported to the test's thread
                errors.append(e)

        return body

    threads = [threading.Thread(target=wrap(fn), daemon=True) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "a thread did not finish: deadlock or lost wake-up"
    if errors:
        raise errors[0]


def wait(event: threading.Event) -> None:
    assert event.wait(TIMEOUT), "timed out waiting for the other thread"


@pytest.mark.parametrize("mode", ["compile", "replay_false", "lazy"])
@pytest.mark.parametrize("ending", ["returns", "raises", "interrupted"])
def test_other_threads_run_eagerly_while_one_traces(mode, ending):
    """Thread A stops inside its traced call; thread B's ops meanwhile run at once (its
    values are there to read while A's trace is still open), never in A's trace: after
    A's call returns, raises or is interrupted, B's tensors still hold their values."""
    a_inside, b_done = threading.Event(), threading.Event()
    xa = xnf.to_xla(torch.arange(4.0))
    xb = xnf.to_xla(torch.arange(3.0))
    b_made = {}

    def traced_body(t):
        t.add_(1)
        y = t * 2
        a_inside.set()
        wait(b_done)
        if ending == "raises":
            raise ValueError("A fails")
        if ending == "interrupted":
            raise Interrupt
        return y

    def thread_a():
        if mode == "lazy":
            with xnf.lazy_mode():
                out = traced_body(xa)
        else:
            out = xnf.compile(traced_body, replay=mode == "compile")(xa)
        b_made["a_out"] = out

    def thread_b():
        wait(a_inside)
        assert context.trace is None  # this thread is not tracing
        y = xb * 3
        xb.add_(1)
        z = torch.nn.functional.relu(y - 2)
        # B reads its values while A's trace is open: they were computed already
        assert torch.equal(cpu(z), torch.relu(torch.arange(3.0) * 3 - 2))
        b_made.update(y=y, z=z, s=z.sum())
        b_done.set()

    def guarded_a():
        try:
            thread_a()
        except ValueError:
            assert ending == "raises"
        except Interrupt:
            assert ending == "interrupted"

    run_threads(guarded_a, thread_b)
    assert context.trace is None
    assert torch.equal(cpu(b_made["y"]), torch.arange(3.0) * 3)
    assert torch.equal(cpu(b_made["z"]), torch.relu(torch.arange(3.0) * 3 - 2))
    assert cpu(b_made["s"]).item() == torch.relu(torch.arange(3.0) * 3 - 2).sum().item()
    assert torch.equal(cpu(xb), torch.arange(3.0) + 1)
    # A's writes: landed unless interrupted (Note [Failed traces])
    expected_a = torch.arange(4.0) if ending == "interrupted" else torch.arange(4.0) + 1
    assert torch.equal(cpu(xa), expected_a)
    if ending == "returns":
        assert torch.equal(cpu(b_made["a_out"]), (torch.arange(4.0) + 1) * 2)


def test_reading_a_tensor_another_threads_trace_writes_gives_its_value_from_before():
    """B reads x while A's trace has a pending write to it: B sees x as it was, as if B's
    read came first; after A's call x has A's value."""
    a_inside, b_done = threading.Event(), threading.Event()
    x = xnf.to_xla(torch.arange(4.0))
    seen = {}

    def body(t):
        t.mul_(10)
        a_inside.set()
        wait(b_done)
        return t + 1

    def thread_a():
        seen["out"] = xnf.compile(body)(x)

    def thread_b():
        wait(a_inside)
        seen["b"] = cpu(x * 1)
        b_done.set()

    run_threads(thread_a, thread_b)
    assert torch.equal(seen["b"], torch.arange(4.0))
    assert torch.equal(cpu(x), torch.arange(4.0) * 10)
    assert torch.equal(cpu(seen["out"]), torch.arange(4.0) * 10 + 1)


def _run_b(b_mode, body, *args):
    if b_mode == "lazy":
        with xnf.lazy_mode():
            out = body(*args)
            xnf.mark_step()
        return out
    return xnf.compile(body)(*args)


@pytest.mark.parametrize("b_mode", ["compile", "lazy"])
def test_a_trace_reads_a_tensor_another_threads_trace_holds_as_it_was_before(b_mode):
    """Note [Reads of another thread's storages]: B's trace reads a tensor A's trace has
    written and not yet run, as an eager read in B would: its value from before A's call."""
    a_inside, b_done = threading.Event(), threading.Event()
    shared = xnf.to_xla(torch.arange(4.0))
    own = xnf.to_xla(torch.ones(2))
    result = {}

    def body_a(t):
        t.add_(1)
        a_inside.set()
        wait(b_done)
        return t * 2

    def thread_a():
        result["a"] = xnf.compile(body_a)(shared)

    def body_b(o, s):
        o.mul_(5)
        return s + o.sum()

    def thread_b():
        wait(a_inside)
        try:
            result["b"] = cpu(_run_b(b_mode, body_b, own, shared))
            assert context.trace is None
        finally:
            b_done.set()

    run_threads(thread_a, thread_b)
    assert torch.equal(result["b"], torch.arange(4.0) + 10)
    assert torch.equal(cpu(shared), torch.arange(4.0) + 1)
    assert torch.equal(cpu(result["a"]), (torch.arange(4.0) + 1) * 2)
    assert torch.equal(cpu(own), torch.full((2,), 5.0))


@pytest.mark.parametrize("b_mode", ["compile", "lazy"])
def test_a_write_to_a_tensor_another_threads_trace_holds_is_refused_clearly(b_mode):
    a_inside, b_done = threading.Event(), threading.Event()
    shared = xnf.to_xla(torch.arange(4.0))
    own = xnf.to_xla(torch.ones(2))
    result = {}

    def body_a(t):
        y = t * 2  # reads shared
        a_inside.set()
        wait(b_done)
        return y

    def thread_a():
        result["a"] = xnf.compile(body_a)(shared)

    def body_b(o, s):
        o.mul_(5)  # B's own tensor: written before the error, so it lands
        s[1:].add_(o.sum())
        return s

    def thread_b():
        wait(a_inside)
        try:
            with pytest.raises(RuntimeError, match="two traced calls at once"):
                _run_b(b_mode, body_b, own, shared)
            assert context.trace is None
        finally:
            b_done.set()

    run_threads(thread_a, thread_b)
    assert torch.equal(cpu(shared), torch.arange(4.0))
    assert torch.equal(cpu(result["a"]), torch.arange(4.0) * 2)
    assert torch.equal(cpu(own), torch.full((2,), 5.0))


def test_threads_serving_one_model_while_another_threads_trace_holds_its_parameters():
    """A compile()d model called by several threads, as a server's thread pool does: B's
    calls, traced and then replayed, read the parameters A's trace holds."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()
    model = xnf.to_xla(copy.deepcopy(ref))
    a_inside, b_done = threading.Event(), threading.Event()
    xs = [torch.randn(4, 6, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    out = {}

    def body_a(x):
        y = model(x)
        a_inside.set()
        wait(b_done)
        return y

    def thread_a():
        with torch.no_grad():
            out["a"] = cpu(xnf.compile(body_a)(xnf.to_xla(xs[0])))

    serve = xnf.compile(model)

    def thread_b():
        wait(a_inside)
        try:
            with torch.no_grad():
                out["b"] = [cpu(serve(xnf.to_xla(x))) for x in xs]
        finally:
            b_done.set()

    run_threads(thread_a, thread_b)
    replays = metrics.replays
    with torch.no_grad():
        later = [cpu(serve(xnf.to_xla(x))) for x in xs]  # replays of a plan B's traces made
        assert metrics.replays > replays
        torch.testing.assert_close(out["a"], ref(xs[0]))
        for ours, again, x in zip(out["b"], later, xs):
            torch.testing.assert_close(ours, ref(x))
            torch.testing.assert_close(again, ref(x))


def test_eager_write_to_a_tensor_another_threads_trace_uses_is_refused_clearly():
    """A write that the other thread's traced call would overwrite when it runs (or that
    would change the value it read) is refused instead of being lost."""
    a_inside, b_done = threading.Event(), threading.Event()
    x = xnf.to_xla(torch.arange(4.0))

    def body(t):
        y = t * 2  # reads x
        a_inside.set()
        wait(b_done)
        t.add_(y)
        return t

    def thread_a():
        xnf.compile(body)(x)

    def thread_b():
        wait(a_inside)
        try:
            with pytest.raises(RuntimeError, match="traced call in another thread"):
                x.add_(100)
            with pytest.raises(RuntimeError, match="traced call in another thread"):
                x[1:].fill_(7)
        finally:
            b_done.set()

    run_threads(thread_a, thread_b)
    assert torch.equal(cpu(x), torch.arange(4.0) * 3)
    x.add_(100)  # after A's call: an ordinary write
    assert torch.equal(cpu(x), torch.arange(4.0) * 3 + 100)


def _model():
    return batchnorm_mlp(6, 16, 3)


def _training(model, steps, seed, barrier=None):
    step = training_step(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    on_xla = next(model.parameters()).device.type != "cpu"
    run = xnf.compile(step) if on_xla else step
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        if barrier is not None:
            barrier.wait(TIMEOUT)
        if on_xla:
            x, y = xnf.to_xla(x), xnf.to_xla(y)
        losses.append(cpu(run(x, y)))
    return losses


@pytest.mark.usefixtures("compiled_first_calls")  # bitwise equal runs: no PyTorch-answered first calls
def test_two_threads_training_their_own_models_match_each_run_alone():
    steps = 8
    refs = [_model(), _model()]
    alone = [_training(xnf.to_xla(copy.deepcopy(refs[i])), steps, seed=i) for i in range(2)]
    cpu_losses = [_training(refs[i], steps, seed=i) for i in range(2)]
    models = [xnf.to_xla(copy.deepcopy(_model())) for _ in range(2)]
    together = [None, None]
    barrier = threading.Barrier(2)

    def worker(i):
        def body():
            together[i] = _training(models[i], steps, seed=i, barrier=barrier)
        return body

    run_threads(worker(0), worker(1))
    for i in range(2):
        for a, b, c in zip(together[i], alone[i], cpu_losses[i]):
            assert torch.equal(a, b)
            torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)
        for p, q in zip(models[i].state_dict().values(), refs[i].state_dict().values()):
            torch.testing.assert_close(cpu(p), q, atol=1e-5, rtol=1e-5)


def test_a_compiled_step_learns_only_its_own_threads_modules_and_optimizers():
    """While thread A's compiled step is traced to learn its replay, thread B runs its own
    model and optimizer: A's replay neither guards nor touches B's (PyTorch's module
    and optimizer hooks that compile() watches are global to the process)."""
    a_model, b_model = _model(), xnf.to_xla(_model())
    ref = copy.deepcopy(a_model)
    xnf.to_xla(a_model)
    a_opt = torch.optim.SGD(a_model.parameters(), lr=0.05)
    b_opt = torch.optim.SGD(b_model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    a_mid, b_done, a_finished = threading.Event(), threading.Event(), threading.Event()
    meetings = []

    def make(model, opt, meet):
        def step(x, y):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if meet:  # only while A's Python runs: when its call is traced
                a_mid.set()
                wait(b_done)
                b_done.clear()
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    a_step = xnf.compile(make(a_model, a_opt, True))
    ref_step = make(ref, ref_opt, False)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(8)]
    b_x, b_y = xnf.to_xla(torch.randn(8, 6)), xnf.to_xla(torch.randint(0, 3, (8,)))

    def thread_a():
        try:
            for x, y in batches:
                a_step(xnf.to_xla(x), xnf.to_xla(y))
        finally:
            a_finished.set()

    def thread_b():
        # B trains in the middle of each of A's traced calls
        while not a_finished.is_set():
            if a_mid.wait(0.05):
                a_mid.clear()
                b_opt.zero_grad()
                torch.nn.functional.cross_entropy(b_model(b_x), b_y).backward()
                b_opt.step()
                meetings.append(1)
                b_done.set()
        b_model.eval()
        b_opt.param_groups[0]["lr"] = 0.5  # would fail A's guards if A had learned B's optimizer
        for p in b_model.parameters():
            p.grad = torch.ones_like(p)

    from xla_native_functions.runtime.platform.metrics import metrics
    xnf.reset_metrics()
    run_threads(thread_a, thread_b)
    assert len(meetings) >= 2 and metrics.replays == len(batches) - len(meetings), xnf.metrics_report()
    a_step(*[xnf.to_xla(t) for t in batches[0]])  # replayed: B's eval() and lr are not A's guards
    assert metrics.replays == len(batches) - len(meetings) + 1
    for x, y in batches + batches[:1]:
        ref_step(x, y)
    for p, q in zip(a_model.state_dict().values(), ref.state_dict().values()):
        torch.testing.assert_close(cpu(p), q, atol=1e-5, rtol=1e-5)
    for p in b_model.parameters():
        assert torch.equal(cpu(p.grad), torch.ones(p.shape))


# ---------------------------------------------------------------- in-place ops on one tensor from several threads
# (Note [Threads and storages] in runtime/core/sharing.py)

SMALL, LARGE = 3, 512 * 1024  # float32 elements: 12 bytes, and 2 MB (donated in place)


def _hammer(writers: int, per_thread: int, write, readers=(), start=None):
    """`writers` threads call write() per_thread times each, while each of `readers`
    runs until the writers are done; every thread starts at one barrier."""
    barrier = threading.Barrier(writers + len(readers))
    done = threading.Event()

    def writer():
        barrier.wait(TIMEOUT)
        for _ in range(per_thread):
            write()

    def reader(read):
        def body():
            barrier.wait(TIMEOUT)
            while not done.is_set():
                read()
        return body

    def writers_then_done():
        try:
            run_threads(*[writer] * writers)
        finally:
            done.set()

    run_threads(writers_then_done, *[reader(r) for r in readers])


@pytest.mark.parametrize("numel", [SMALL, LARGE], ids=["small", "large_donated"])
def test_in_place_adds_from_four_threads_all_land(numel):
    x = xnf.to_xla(torch.zeros(numel))
    sums = []

    def read():
        # a whole snapshot, before or after each write: every element equal
        v = cpu(x * 1)
        assert torch.equal(v, torch.full_like(v, v[0].item()))
        sums.append(v[0].item())

    def read_view():  # a view of the tensor is made while a write may have its buffer
        v = cpu(x[::2][-2:].sum())
        assert v.item() % 1 == 0

    _hammer(4, 250, lambda: x.add_(1), readers=[read, read_view])
    assert torch.equal(cpu(x), torch.full((numel,), 1000.0))
    assert sums and all(0 <= s <= 1000 and s == int(s) for s in sums)


def test_in_place_ops_through_views_from_threads_all_land():
    x = xnf.to_xla(torch.zeros(4, LARGE // 4))
    rows = [x[i] for i in range(4)]

    def write():
        for r in rows:
            r.add_(1)
        x[:, :8].mul_(1)  # a strided write of every row
    _hammer(3, 40, write, readers=[lambda: cpu(x.sum())])
    assert torch.equal(cpu(x), torch.full((4, LARGE // 4), 120.0))


def test_foreach_in_place_ops_from_threads_all_land():
    params = [xnf.to_xla(torch.zeros(n)) for n in (LARGE, SMALL, LARGE)]
    ones = [xnf.to_xla(torch.ones(p.shape)) for p in params]
    _hammer(3, 50, lambda: torch._foreach_add_(params, ones), readers=[lambda: cpu(params[0] + params[2])])
    for p in params:
        assert torch.equal(cpu(p), torch.full(p.shape, 150.0))


@pytest.mark.parametrize("numel", [SMALL, LARGE], ids=["small", "large_donated"])
def test_compiled_and_eager_updates_of_one_tensor_from_threads_all_land(numel):
    """Replays of a compiled step (and the calls traced to learn it) and eager in-place
    ops on one shared tensor: none is lost, no reader sees a deleted buffer."""
    x = xnf.to_xla(torch.zeros(numel))
    step = xnf.compile(lambda t: t.add_(1))

    def traced_or_refused():
        # a traced call meeting a tensor another thread's traced call holds is refused,
        # and then it has written nothing
        try:
            step(x)
        except RuntimeError as e:
            assert "two traced calls at once" in str(e) or "traced call in another thread" in str(e)
            traced_or_refused.refused += 1

    traced_or_refused.refused = 0

    def eager():
        try:
            x.add_(1)
        except RuntimeError as e:
            assert "traced call in another thread" in str(e)
            eager.refused += 1

    eager.refused = 0
    _hammer(2, 100, traced_or_refused, readers=[lambda: cpu(x.sum())])
    _hammer(1, 100, eager)
    step(x)
    landed = 2 * 100 - traced_or_refused.refused + 100 - eager.refused + 1
    assert torch.equal(cpu(x), torch.full((numel,), float(landed)))


def test_eager_writes_while_another_thread_replays_on_the_tensor_all_land():
    x = xnf.to_xla(torch.zeros(LARGE))
    step = xnf.compile(lambda t: t.add_(1))
    for _ in range(4):
        step(x)  # replayed from here on: no trace holds x
    from xla_native_functions.runtime.platform.metrics import metrics
    xnf.reset_metrics()
    a_done = threading.Event()

    def replays():
        try:
            for _ in range(100):
                step(x)
        finally:
            a_done.set()

    def eager():
        for _ in range(100):
            x.add_(1)

    run_threads(replays, eager, lambda: [cpu(x * 1) for _ in range(20)])
    assert metrics.replays == 100
    assert torch.equal(cpu(x), torch.full((LARGE,), 204.0))
