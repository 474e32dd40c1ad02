"""The shared harness of the lowering tests: run a lowering or a shape function the way
the runtime does (tensors as JAX arrays, Scalar arguments dynamic, everything else
static), compare with PyTorch CPU and meta, make inputs, and the one table of which
test file holds the cases of lowerings whose family's file does not.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.testing import make_tensor

import xla_native_functions as xnf
import xla_native_functions.lowerings as lowerings_package
import xla_native_functions.shape_fns as shape_fns_package
from xla_native_functions.runtime.core.convert import jax_to_cpu, numpy_of
from xla_native_functions.runtime.exec.registry import NODES
from xla_native_functions.shape_fns.common import TensorMeta


# The runtime's own IR nodes (the manifest's `internal` section): tested through the
# operators built on them, so the per-family coverage checks leave them out.
INTERNAL_NODES = frozenset(name for name, cls in NODES.items() if cls.section == "internal")


def functions_in(modules, prefix: str = "", suffix: str = "", operators_only: bool = False) -> dict[str, Any]:
    """The functions defined in `modules` whose names start with `prefix` and end with
    `suffix` (a name defined twice is an error); `operators_only`: not those of internal
    nodes."""
    found = {}
    for module in modules:
        for name, fn in vars(module).items():
            op = name.removeprefix(prefix).removesuffix(suffix)
            if operators_only and op in INTERNAL_NODES:
                continue
            if name.startswith(prefix) and name.endswith(suffix) and inspect.isfunction(fn) \
                    and fn.__module__ == module.__name__:
                assert name not in found, f"{name} defined twice"
                found[name] = fn
    return found


def _modules(package) -> list:
    return [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]


# Every lowering and shape function, by name: what run_lowering and run_shape_fn call.
LOWERINGS = functions_in(_modules(lowerings_package), prefix="lower_")
SHAPE_FNS = functions_in(_modules(shape_fns_package), suffix="_output_shape")

# Ops whose lowerings sit in one family but whose cases are in another test file. Each of
# these files checks that its cases cover exactly its set; the file of the family counts
# them as tested.
CASES_LIVE_IN = {
    "test_ops_special.py": {
        "celu", "dist", "hardshrink", "hardshrink_backward", "igamma", "igammac", "ldexp_Tensor",
        "native_dropout_backward", "renorm", "softshrink", "softshrink_backward", "special_airy_ai",
        "special_bessel_j0", "special_bessel_j1", "special_bessel_y0", "special_bessel_y1",
        *(f"special_{family}_polynomial_{kind}{overload}"
          for family, kinds in (("chebyshev", "tuvw"), ("shifted_chebyshev", "tuvw"), ("hermite", ("h", "he")),
                                ("laguerre", "l"), ("legendre", "p"))
          for kind in kinds for overload in ("", "_n_scalar", "_x_scalar")),
        "special_modified_bessel_k0", "special_modified_bessel_k1", "special_scaled_modified_bessel_k0",
        "special_scaled_modified_bessel_k1", "threshold",
    },
    "test_ops_nn_sampling.py": {
        "_euclidean_dist", "_trilinear", "_upsample_bicubic2d_aa", "_upsample_bicubic2d_aa_backward",
        "_upsample_bilinear2d_aa", "_upsample_bilinear2d_aa_backward", "_upsample_nearest_exact1d",
        "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact2d", "_upsample_nearest_exact2d_backward",
        "_upsample_nearest_exact3d", "_upsample_nearest_exact3d_backward", "_weight_norm_interface",
        "_weight_norm_interface_backward", "adaptive_max_pool3d", "adaptive_max_pool3d_backward",
        "affine_grid_generator", "embedding_renorm",
        "grid_sampler_2d", "grid_sampler_2d_backward", "grid_sampler_3d", "grid_sampler_3d_backward", "max_unpool2d",
        "max_unpool3d", "upsample_bicubic2d", "upsample_bicubic2d_backward",
    },
    "test_ops_fractional_pool.py": {
        "fractional_max_pool2d", "fractional_max_pool2d_backward", "fractional_max_pool3d",
        "fractional_max_pool3d_backward",
    },
    "test_ops_linalg_solve.py": {
        "geqrf", "linalg_eig", "linalg_ldl_factor_ex", "linalg_ldl_solve", "linalg_pinv_atol_rtol_tensor", "ormqr",
    },
}


def cases_elsewhere(this_file: str) -> set[str]:
    """Unambiguous names of the ops whose cases other test files hold (CASES_LIVE_IN)."""
    return set().union(*(ops for file, ops in CASES_LIVE_IN.items() if file != this_file))


def unambiguous_name(op: torch._ops.OpOverload) -> str:
    name = op._schema.name.split("::")[1]
    return f"{name}_{op._schema.overload_name}" if op._schema.overload_name else name


# ---------------------------------------------------------------------------- running


def to_jax(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x  # a Python number in a Tensor position traces to a weak scalar
    return jnp.asarray(numpy_of(x))  # (bfloat16 and float8 through their bits)


def to_torch(x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, (tuple, list)):
        return tuple(to_torch(v) for v in x)
    x = np.asarray(x)
    if x.dtype.itemsize <= 2 and x.dtype.kind == "V":  # bfloat16 and float8 (ml_dtypes): through their bits
        return jax_to_cpu(x)
    return torch.from_numpy(x.copy())


def arg_kind(arg: torch._C.Argument) -> str:
    t = str(arg.type)
    if t in ("Tensor", "Optional[Tensor]"):
        return "tensor"
    if t == "List[Tensor]":
        return "tensors"
    if t in ("number", "Optional[number]"):
        return "scalar"
    return "static"


def run_lowering(op, args, kwargs):
    return call_lowering(LOWERINGS[f"lower_{unambiguous_name(op)}"], op, args, kwargs)


def call_lowering(fn, op, args, kwargs):
    """Run lowering `fn` of aten `op` the way the runtime does (Scalars dynamic, attributes static)."""
    bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    kinds = {a.name: arg_kind(a) for a in op._schema.arguments}
    with jax.enable_x64(True):
        call_args, static = {}, []
        for name, value in bound.items():
            kind = kinds[name]
            if kind == "tensor":
                call_args[name] = to_jax(value)
            elif kind == "tensors":
                call_args[name] = tuple(to_jax(t) for t in value)
            elif kind == "scalar":
                call_args[name] = value
            else:
                call_args[name] = tuple(value) if isinstance(value, list) else value
                static.append(name)
        out = jax.jit(fn, static_argnames=tuple(static))(**call_args)
        return to_torch(out)


def to_meta_arg(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return TensorMeta(tuple(x.shape), x.dtype)
    if isinstance(x, list):
        return [to_meta_arg(v) for v in x] if x and isinstance(x[0], torch.Tensor) else tuple(x)
    return x


def run_shape_fn(op, args, kwargs):
    return call_shape_fn(SHAPE_FNS[f"{unambiguous_name(op)}_output_shape"], args, kwargs)


def call_shape_fn(fn, args, kwargs):
    """Run shape function `fn` on the metadata of `args` and `kwargs`."""
    return fn(*map(to_meta_arg, args), **{k: to_meta_arg(v) for k, v in kwargs.items()})


def on_device(op, args, kwargs, device, ref=None):
    def move(x):
        if isinstance(x, torch.Tensor):
            return x.to(device)
        if isinstance(x, list):
            return [move(v) for v in x]
        return x

    kwargs = {k: move(v) for k, v in kwargs.items()}
    if any(a.name == "device" for a in op._schema.arguments):
        kwargs.setdefault("device", device)
    return (ref or op)(*map(move, args), **kwargs)


def as_meta(result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, (tuple, list)):
        return tuple(as_meta(r) for r in result)
    return TensorMeta(tuple(result.shape), result.dtype)


def assert_same(ours, expected, **tol):
    if isinstance(expected, (tuple, list)):
        assert isinstance(ours, tuple) and len(ours) == len(expected)
        for o, e in zip(ours, expected):
            assert_same(o, e, **tol)
    elif expected is None:
        assert ours is None
    else:
        torch.testing.assert_close(ours, expected, equal_nan=True, **tol)


def cpu_result(case):
    """(PyTorch CPU's result of a case, None) or (None, the exception it raised)."""
    try:
        return (case.ref or case.op)(*case.args, **case.kwargs), None
    except Exception as e:  # noqa: BLE001 - callers compare the type
        return None, e


def assert_lowering_matches_cpu(case, run=run_lowering):
    """The lowering's result is PyTorch CPU's, within the case's tolerance. `run`: how
    the file runs a lowering (run_lowering, or one over lowerings of its own)."""
    expected = (case.ref or case.op)(*case.args, **case.kwargs)
    assert_same(run(case.op, case.args, case.kwargs), expected, **case.tol)


def assert_matches_cpu_or_raises_like_it(case):
    """Where PyTorch CPU computes the case, the shape function gives its result's shape and
    dtype and the lowering its values; where CPU raises, the shape function raises the
    same exception type."""
    expected, error = cpu_result(case)
    if error is not None:
        with pytest.raises(Exception) as ours:
            run_shape_fn(case.op, case.args, case.kwargs)
        assert type(ours.value) is type(error), (error, ours.value)
        return
    assert run_shape_fn(case.op, case.args, case.kwargs) == as_meta(expected)
    assert_same(run_lowering(case.op, case.args, case.kwargs), expected, **case.tol)


def assert_shape_fn_matches_meta(case, run=run_shape_fn):
    """The shape function gives PyTorch's meta result (its CPU result where the two differ)."""
    device = "meta" if case.meta_agrees else "cpu"
    expected = as_meta(on_device(case.op, case.args, case.kwargs, device, case.ref))
    assert run(case.op, case.args, case.kwargs) == expected


def assert_shape_fn_raises_like_cpu(case, run=run_shape_fn, exact_type=True):
    """The shape function refuses an ErrorCase with the exception type PyTorch CPU raises
    (or, without `exact_type`, a subclass of it), and says why."""
    with pytest.raises(Exception) as cpu_error:
        case.op(*case.args, **case.kwargs)
    with pytest.raises(Exception) as our_error:
        run(case.op, case.args, case.kwargs)
    if exact_type:
        assert type(our_error.value) is type(cpu_error.value), (cpu_error.value, our_error.value)
    else:
        assert isinstance(our_error.value, type(cpu_error.value)), (cpu_error.value, our_error.value)
    assert str(our_error.value)


def assert_signatures_match_schema(name, op, lowerings=LOWERINGS, shape_fns=SHAPE_FNS, check_defaults=True):
    """Lowering `lower_<name>` and shape function `<name>_output_shape` take exactly the
    parameters of `op`'s schema (assert_params_match_schema)."""
    for fn in (lowerings[f"lower_{name}"], shape_fns[f"{name}_output_shape"]):
        assert_params_match_schema(fn, op._schema, check_defaults)


def assert_params_match_schema(fn, schema, check_defaults=True):
    """`fn` takes exactly the schema's parameters: names, order, keyword-only-ness,
    which have defaults (and, with `check_defaults`, their values)."""
    params = list(inspect.signature(fn).parameters.values())
    assert [p.name for p in params] == [a.name for a in schema.arguments]
    for p, a in zip(params, schema.arguments):
        kind = inspect.Parameter.KEYWORD_ONLY if a.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert p.kind is kind, p.name
        assert (p.default is inspect.Parameter.empty) == (not a.has_default_value()), p.name
        if check_defaults and a.has_default_value():
            default = a.default_value
            default = tuple(default) if isinstance(default, list) else default
            assert p.default == default, p.name


# ---------------------------------------------------------------------------- cases


@dataclass
class Case:
    id: str
    op: Any
    args: tuple
    kwargs: dict = field(default_factory=dict)
    tol: dict = field(default_factory=dict)
    # False where PyTorch's meta kernel disagrees with its CPU kernel; the shape
    # function then follows CPU and is checked against the CPU result instead.
    meta_agrees: bool = True
    # The reference, when the aten overload itself refuses a Python number in a Tensor
    # position (only add/sub/mul/div accept one): the public function, which wraps it.
    ref: Any = None


@dataclass
class ErrorCase:
    id: str
    op: Any
    args: tuple
    kwargs: dict = field(default_factory=dict)


def T(*shape, dtype=torch.float32, low=None, high=None):
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def ints(*shape, low=-9, high=10, dtype=torch.int64):
    return T(*shape, dtype=dtype, low=low, high=high)


def assert_conv_matches_cpu(x_shape, w_shape, stride, padding, dilation, groups, dtype) -> None:
    """A convolution's output and its input, weight and bias gradients on our device
    against PyTorch CPU's (conv1d/2d/3d by the input's rank)."""
    conv = getattr(torch.nn.functional, f"conv{len(x_shape) - 2}d")
    torch.manual_seed(0)
    inputs = torch.randn(x_shape, dtype=dtype), torch.randn(w_shape, dtype=dtype), torch.randn(w_shape[0], dtype=dtype)
    assert_values_and_gradients_match_cpu(lambda x, w, b: conv(x, w, b, stride, padding, dilation, groups), inputs)


def assert_values_and_gradients_match_cpu(fn, inputs) -> None:
    """`fn(*inputs)` and the gradients of all inputs on our device against PyTorch CPU's,
    within float32's or float64's tolerance (the inputs' dtype)."""
    ref = [t.clone().requires_grad_() for t in inputs]
    ours = [xnf.to_xla(t).requires_grad_() for t in inputs]
    out_ref, out = fn(*ref), fn(*ours)
    dtype = inputs[0].dtype
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 1e-10, "rtol": 1e-10}
    assert out.shape == out_ref.shape and out.dtype == out_ref.dtype
    torch.testing.assert_close(xnf.to_torch(out), out_ref.detach(), **tol)
    grad = torch.randn(out_ref.shape, dtype=dtype)
    out_ref.backward(grad)
    out.backward(xnf.to_xla(grad))
    for mine, theirs in zip(ours, ref):
        torch.testing.assert_close(xnf.to_torch(mine.grad), theirs.grad, **tol)
