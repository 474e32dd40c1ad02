"""torch.compile backend benchmark: steady-state medians of our Dynamo backend
("xla_native") against our own compiled mode (xla_native_functions.compile), PyTorch
CPU eager and torch.compile's default backend (inductor), all measured in this run.

    python scripts/bench_dynamo.py [--quick]

Workloads: an MLP (256-512-512-10, batch 64) forward under no_grad, and its training
step (forward, mean squared error, backward, SGD step), with the module compiled
(`torch.compile(model)`: forward and backward graphs, the optimizer step on PyTorch CPU)
and with the whole step compiled (`torch.compile(step)`: Dynamo breaks it at
`backward()` and around `optimizer.step()`, whose update becomes a graph of its own).
Our compiled mode runs the whole step, optimizer included, as one XLA program on
parameters that live on the JAX side. The training table ends with the ratios the
targets are stated in (docs/dynamo.md). The transfer line isolates what the backend
pays per call to move CPU tensors in and out.

`--zoo [NAME ...] [--size medium]` times instead the training step (SGD) of the zoo's
models (scripts/zoo) with the module compiled by inductor and by the backend, in interleaved
rounds in one process (RNNs traced, as `scripts/run_model.py` does), and with every graph
replaced by its first call's outputs: the time a step spends outside its graphs, so that
what each backend's graphs cost is the difference.

Start it with OMP_WAIT_POLICY=PASSIVE on a machine with few cores (docs/dynamo.md,
"PyTorch's OpenMP workers on few cores").
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Callable

import torch
import torch.nn as nn

import xla_native_functions as xnf
from xla_native_functions.runtime.core import convert
from xla_native_functions.runtime.frontends import dynamo


def medians_ms(fns: dict[str, Callable], number: int, repeat: int) -> dict[str, float]:
    """Median ms per call of each function, the functions interleaved round by round so
    that load changes on a shared machine hit all of them alike."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            runs[name].append((time.perf_counter() - start) / number * 1e3)
    return {name: sorted(r)[repeat // 2] for name, r in runs.items()}


def make_mlp() -> nn.Module:
    torch.manual_seed(0)
    dims = [256, 512, 512, 10]
    layers: list[nn.Module] = []
    for i, o in zip(dims, dims[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def inference(number: int, repeat: int) -> dict[str, float]:
    model = make_mlp()
    x = torch.randn(64, 256)
    fns = {"torch eager": lambda: model(x)}
    torch._dynamo.reset()
    inductor = torch.compile(copy.deepcopy(model))
    fns["torch.compile inductor"] = lambda: inductor(x)
    ours = torch.compile(copy.deepcopy(model), backend=dynamo.BACKEND_NAME)
    fns["torch.compile xla_native"] = lambda: ours(x)
    moved = xnf.to_xla(copy.deepcopy(model))
    xx = xnf.to_xla(x)
    step = xnf.compile(lambda inp: moved(inp))
    fns["xla_native_functions.compile"] = lambda: xnf.to_jax(step(xx)).block_until_ready()
    with torch.no_grad():
        return medians_ms(fns, number, repeat)


def training(number: int, repeat: int) -> dict[str, float]:
    x, y = torch.randn(64, 256), torch.randn(64, 10)

    def torch_step(model, params):
        opt = torch.optim.SGD(params, lr=1e-3)

        def step():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    fns = {}
    model = make_mlp()
    fns["torch eager"] = torch_step(model, model.parameters())
    torch._dynamo.reset()
    model = make_mlp()
    fns["torch.compile inductor"] = torch_step(torch.compile(model), model.parameters())
    model = make_mlp()
    fns["torch.compile xla_native"] = torch_step(torch.compile(model, backend=dynamo.BACKEND_NAME), model.parameters())

    # the whole step, optimizer.step() included, compiled by torch.compile (PyTorch
    # compiles optimizers): Dynamo breaks the graph at backward()
    # (torch_step's closure holds the model and the batch: a step reading them as
    # globals would leave Dynamo a frame without tensors after zero_grad()'s graph
    # break, and the forward would run uncompiled.)
    model = make_mlp()
    fns["whole step torch.compile inductor"] = torch.compile(torch_step(model, model.parameters()))
    model = make_mlp()
    fns["whole step torch.compile xla_native"] = torch.compile(torch_step(model, model.parameters()),
                                                               backend=dynamo.BACKEND_NAME)

    moved = xnf.to_xla(make_mlp())
    opt = torch.optim.SGD(moved.parameters(), lr=1e-3)
    xx, yy = xnf.to_xla(x), xnf.to_xla(y)

    def our_step():
        opt.zero_grad()
        loss = ((moved(xx) - yy) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    compiled = xnf.compile(our_step)
    fns["xla_native_functions.compile"] = lambda: xnf.to_jax(compiled()).block_until_ready()
    return medians_ms(fns, number, repeat)


def transfer(number: int, repeat: int) -> dict[str, float]:
    """Per call: the MLP's 6 parameters and one batch into a jitted function, one result
    out. The backend passes a tensor it sees for the first time as a NumPy view of its
    memory, which the jitted call reads in place, and from its second call on as a JAX
    array sharing that memory."""
    import jax

    model = make_mlp()
    tensors = [p.detach() for p in model.parameters()] + [torch.randn(64, 256)]
    fn = jax.jit(lambda *xs: sum(x.reshape(-1)[0] for x in xs))
    out = fn(*[convert.numpy_view(t) for t in tensors])

    def call(arrays):
        def run():
            with xnf.x64():
                fn(*arrays).block_until_ready()
            convert.jax_to_cpu(out + 0)
        return run

    host = [convert.numpy_view(t) for t in tensors]
    # A tensor DLPack cannot share (an unaligned buffer, say) goes in as its NumPy view.
    shared = [convert.shared_array(t) for t in tensors]
    shared = [h if a is None else a for a, h in zip(shared, host)]
    return medians_ms({"first": call(host), "shared": call(shared)}, number, repeat)


def replaying_backend() -> Callable:
    """A torch.compile backend whose ATen graphs return their first call's outputs: a
    step compiled with it costs only what lies outside the graphs (Dynamo's guards,
    AOTAutograd's wrappers, the autograd engine, the loss and the optimizer on PyTorch
    CPU), which is the same for every backend."""
    from torch._dynamo.backends.common import aot_autograd

    def compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        first: list = []

        def run(args: list) -> list:
            if not first:
                first.append(list(gm(*args)))
            args.clear()
            return list(first[0])
        run._boxed_call = True
        return run
    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)


def zoo_training(names: list[str], size_name: str, number: int, repeat: int) -> None:
    """Each named zoo model's (every one's, without names) SGD training step, the module
    compiled by inductor and by the backend, medians of interleaved rounds; and the
    step's time outside its graphs (replaying_backend), so that each backend's graphs'
    own time is the difference."""
    from run_model import zoo_step
    from zoo import MODELS, SIZES

    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        raise SystemExit(f"bench_dynamo.py: no zoo model named {', '.join(unknown)}; the zoo has {', '.join(MODELS)}")
    names = names or sorted(MODELS)

    size = SIZES[size_name]
    print(f"zoo training steps (SGD, size {size_name}), module compiled; medians of {repeat} interleaved rounds")
    print("  outside graphs: the step with every graph returning its first call's outputs; graphs: a backend's step "
          "minus that")
    print(f"  {'model':16s} {'inductor ms':>12s} {'xla_native ms':>14s} {'xla_native / inductor':>22s} "
          f"{'outside graphs ms':>18s} {'inductor graphs ms':>19s} {'xla_native graphs ms':>21s}")
    with torch._dynamo.config.patch(allow_rnn=True):
        for name in names:
            spec = MODELS[name]
            case = spec.build(size.batch, attn="eager", size=size) if spec.hf else spec.build(size.batch, size=size)
            inputs = (case.inputs, case.kwargs or {}, case.target)
            torch._dynamo.reset()
            fns = {}
            for backend in ("inductor", dynamo.BACKEND_NAME, "outside"):
                compiler = replaying_backend() if backend == "outside" else backend
                model = torch.compile(copy.deepcopy(case.model), backend=compiler)
                fns[backend] = zoo_step(case, model, copy.deepcopy(inputs), "train-sgd")
            times = medians_ms(fns, number, repeat)
            ind, ours, outside = times["inductor"], times[dynamo.BACKEND_NAME], times["outside"]
            print(f"  {name:16s} {ind:12.3f} {ours:14.3f} {ours / ind:21.2f}x {outside:18.3f} {ind - outside:19.3f} "
                  f"{ours - outside:21.3f}", flush=True)


def print_table(title: str, times: dict[str, float]) -> None:
    base = times["torch eager"]
    ours = times["torch.compile xla_native"]
    print(title)
    print(f"  {'mode':36s} {'median ms':>10s} {'vs torch eager':>15s} {'vs xla_native backend':>22s}")
    for name, t in times.items():
        print(f"  {name:36s} {t:10.3f} {t / base:14.2f}x {t / ours:21.2f}x")


def print_ratios(times: dict[str, float]) -> None:
    """The training columns the targets are stated in, as ratios of this run's medians:
    the backend against inductor (target <= 1), and the whole step compiled by
    torch.compile against our compile() of the same step (target <= 1.1)."""
    mode = times["xla_native_functions.compile"]
    print("  targets, this run:")
    print(f"    module compiled, backend / inductor:            "
          f"{times['torch.compile xla_native'] / times['torch.compile inductor']:.2f}x (target <= 1.00x)")
    print(f"    whole step compiled, backend / inductor:        "
          f"{times['whole step torch.compile xla_native'] / times['whole step torch.compile inductor']:.2f}x")
    print(f"    whole step compiled by the backend / compile(): "
          f"{times['whole step torch.compile xla_native'] / mode:.2f}x (target <= 1.10x)")
    print(f"    module compiled by the backend / compile():     {times['torch.compile xla_native'] / mode:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--zoo", nargs="*", metavar="NAME",
                        help="time the zoo's training steps instead (every model without a NAME)")
    parser.add_argument("--size", choices=("small", "medium"), default="small", help="the zoo's model size")
    parser.add_argument("--threads", type=int, default=1,
                        help="PyTorch intra-op threads (on a shared 2-core machine more threads make torch's "
                             "timings erratic)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import os

    print(f"torch {torch.__version__}, {args.threads} torch thread(s), "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, load average {os.getloadavg()[0]:.1f}")
    number, repeat = (10, 3) if args.quick else (50, 7)
    if args.zoo is not None:
        zoo_training(args.zoo, args.size, number, repeat)
        return
    print_table("MLP 256-512-512-10, batch 64, forward (no_grad)", inference(number, repeat))
    times = training(number, repeat)
    print_table("MLP 256-512-512-10, batch 64, training step (SGD)", times)
    print_ratios(times)
    t = transfer(number, repeat)
    print(f"a jitted call taking the 6 parameters and the batch, one result out: {t['first']:.3f} ms with NumPy "
          f"views (first calls), {t['shared']:.3f} ms with JAX arrays sharing their memory")
    print(dynamo.dynamo_report())


if __name__ == "__main__":
    main()
