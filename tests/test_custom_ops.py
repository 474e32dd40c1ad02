"""Operators outside aten: manifest entries of other libraries (`ns::op` with a
`libraries:` module), and lowerings registered at run time with
`xla_native_functions.register_lowering`, against the operators' PyTorch CPU
implementations (tests/custom_op_library.py, namespace `testlib`)."""

from __future__ import annotations

import collections
import functools
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
for path in (REPO, TESTS):  # `codegen` is not part of the installed package; the library is a test helper
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import custom_op_library as lib  # noqa: E402
from codegen import generate as gen  # noqa: E402
from codegen import library_schemas  # noqa: E402
from codegen.manifest import ManifestError  # noqa: E402

import xla_native_functions as xnf  # noqa: E402
from xla_native_functions.runtime.core.ir import Value  # noqa: E402
from xla_native_functions.runtime.exec import custom_ops, graph  # noqa: E402
from xla_native_functions.runtime.frontends import dynamo  # noqa: E402
from xla_native_functions.runtime.platform.metrics import metrics  # noqa: E402

# ============================================================ the manifest

LOWERINGS = '''\
"""Lowerings of the testlib operators, for a generated test package."""

import jax.numpy as jnp


def lower_testlib_mix(xs, bias, dim, scale, square, offset):
    out = jnp.stack(xs).sum(0) * scale
    if square:
        out = out * out
    if bias is not None:
        out = out + bias
    return jnp.cumsum(out + offset, axis=dim, dtype=out.dtype)


def lower_testlib_halves(x, dim):
    first, second = jnp.split(x, [(x.shape[dim] + 1) // 2], axis=dim)
    return first * 2, second > 0
'''
SHAPE_FNS = '''\
"""Shape functions of the testlib operators, for a generated test package."""

import torch

from .common import TensorMeta


def testlib_mix_output_shape(xs, bias, dim, scale, square, offset):
    return TensorMeta(xs[0].shape, xs[0].dtype)


def testlib_halves_output_shape(x, dim):
    dim = dim % len(x.shape)
    n = x.shape[dim]
    first = x.shape[:dim] + ((n + 1) // 2,) + x.shape[dim + 1:]
    second = x.shape[:dim] + (n // 2,) + x.shape[dim + 1:]
    return TensorMeta(first, x.dtype), TensorMeta(second, torch.bool)
'''
IMPLS = '''\
def impl_testlib_rms_norm(x, *, eps=1e-06):
    return x
'''

MANIFEST = """\
backend: XLA
# the module whose import registers each namespace's operators
libraries:
  testlib: custom_op_library
full_codegen:
  - testlib::halves
  - testlib::mix
supported:
  - testlib::rms_norm
fallback:
  - testlib::unlowered
"""


@pytest.fixture(scope="module", autouse=True)
def schema_cache(tmp_path_factory):
    """The generator's library schema cache, in a folder of this module's (shared by its
    tests: the cache key tells libraries and their versions apart)."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(library_schemas, "cache_dir", lambda: folder)
        yield folder


@pytest.fixture
def library_cache(monkeypatch):
    """A record of the schema-reading subprocesses a test starts."""
    runs = []
    real = library_schemas._run_child

    def counted(libraries):
        runs.append([lib.module for lib in libraries])
        return real(libraries)

    monkeypatch.setattr(library_schemas, "_run_child", counted)
    return runs


def make_root(path: Path, lowerings=LOWERINGS, shape_fns=SHAPE_FNS, impls=IMPLS) -> Path:
    for folder, text in (("lowerings", lowerings), ("shape_fns", shape_fns), ("runtime", impls)):
        (path / folder).mkdir(parents=True, exist_ok=True)
        (path / folder / "testlib.py").write_text(text)
    return path


def write(tmp_path: Path, text: str, name: str = "manifest.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def render_error(tmp_path: Path, text: str, root: Path) -> str:
    with pytest.raises(ManifestError) as info:
        gen.render(write(tmp_path, text), root=root)
    return str(info.value).replace(str(tmp_path), "<tmp>")


def test_library_entries_get_namespaced_names_and_are_registered_by_name(tmp_path, library_cache):
    result = gen.render(write(tmp_path, MANIFEST), root=make_root(tmp_path / "root"))
    assert result.warnings == [] and result.unavailable == {}
    specs = {s.op: s for s in result.ops}
    assert sorted(specs) == [
        "testlib::halves",
        "testlib::mix",
        "testlib::rms_norm",
        "testlib::unlowered",
    ]  # no derived forms
    mix = specs["testlib::mix"]
    assert (mix.name, mix.class_name, mix.lowering, mix.shape_fn) == (
        "testlib_mix", "TestlibMix", "lower_testlib_mix", "testlib_mix_output_shape")
    assert specs["testlib::rms_norm"].impl == "impl_testlib_rms_norm"
    assert [(a.name, a.kind) for a in mix.args] == [
        ("xs", "TENSOR_LIST"), ("bias", "OPT_TENSOR"), ("dim", "ATTR"), ("scale", "ATTR"), ("square", "ATTR"),
        ("offset", "SCALAR")]
    files = result.files
    assert "\nclass TestlibMix(Node):\n" in files["ir.py"] and "\nclass TestlibHalves(Node):\n" in files["ir.py"]
    assert "        return lower_testlib_mix(xs, bias, dim, scale, square, offset)\n" in files["ir.py"]
    assert "from .lowerings.testlib import (\n    lower_testlib_halves,\n    lower_testlib_mix,\n)" in files["ir.py"]
    assert (
        "def testlib_rms_norm(x, *, eps=1e-06):\n    return ir.TestlibRmsNorm.impl(x, eps=eps)\n"
        in files["dispatch.py"]
    )
    assert "_rt_fallback(torch.ops.testlib.unlowered.default, (x,), {})" in files["dispatch.py"]
    # Not in REGISTRY (their OpOverloads exist only once the library is loaded): by name.
    registry = files["registry.py"]
    assert "testlib" not in registry[registry.index("REGISTRY = {"):registry.index("LIBRARY_OPS")]
    assert ("    \"testlib::mix\": ('testlib::mix(Tensor[] xs, Tensor? bias, int dim, float scale, bool square, "
            "Scalar offset) -> Tensor', dispatch.testlib_mix),\n") in registry
    assert 'UNAVAILABLE_LIBRARY_OPS = {\n}' in registry
    assert '    "testlib::rms_norm": "supported",\n' in registry
    assert (
        "_install(REGISTRY, SECTIONS, NODES, LIBRARY_OPS, UNAVAILABLE_LIBRARY_OPS, policy=POLICY)"
        in files["__init__.py"]
    )
    assert "full_codegen\ttestlib::halves(Tensor x, SymInt dim) -> (Tensor, Tensor)\n" in files["ops.txt"]
    for name, text in files.items():
        if name.endswith(".py"):
            compile(text, name, "exec")


def test_schemas_are_read_once_and_again_when_the_library_changes(tmp_path, library_cache, monkeypatch):
    module = tmp_path / "mods" / "cachelib_ops.py"
    module.parent.mkdir()
    op = '''
@torch.library.custom_op("cachelib::{0}", mutates_args=(), device_types="cpu")
def {0}(x: torch.Tensor) -> torch.Tensor:
    return x
'''
    module.write_text("import torch\n" + op.format("one"))
    monkeypatch.syspath_prepend(str(module.parent))
    text = "backend: XLA\nlibraries: {cachelib: cachelib_ops}\nfull_codegen:\nsupported:\nfallback:\n  - cachelib::%s\n"
    root = make_root(tmp_path / "root")
    gen.render(write(tmp_path, text % "one"), root=root)
    gen.render(write(tmp_path, text % "one"), root=root)
    assert library_cache == [["cachelib_ops"]]  # the second run reads the cache
    assert "unknown operator 'cachelib::two' (after importing cachelib_ops)" in render_error(
        tmp_path, text % "two", root
    )
    module.write_text("import torch\n" + op.format("one") + op.format("two"))
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 10**9))
    assert [s.op for s in gen.render(write(tmp_path, text % "two"), root=root).ops] == ["cachelib::two"]
    assert library_cache == [["cachelib_ops"]] * 2


def test_aten_only_manifest_imports_neither_torch_nor_jax():
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from codegen.generate import REPO, render
        render(REPO / "native_functions.yaml")
        loaded = [m for m in ("torch", "jax", "codegen.library_schemas", "subprocess") if m in sys.modules]
        assert not loaded, loaded
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)


@pytest.mark.parametrize("module_text, error", [
    (None, "ModuleNotFoundError: No module named 'no_such_module_for_tests'"),
    ("raise ImportError('its extension did not load')", "ImportError: its extension did not load"),
    ("import warnings\nwarnings.warn('no kernels here')",
     "importing no_such_module_for_tests registered no nolib:: operators (it warned: no kernels here)"),
])
def test_entries_of_a_library_that_does_not_import_are_skipped_with_one_warning(
        tmp_path, library_cache, monkeypatch, capsys, module_text, error):
    if module_text is not None:
        (tmp_path / "mods").mkdir()
        (tmp_path / "mods" / "no_such_module_for_tests.py").write_text(module_text + "\n")
        monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    manifest = write(tmp_path, "backend: XLA\nlibraries:\n  nolib: no_such_module_for_tests\nfull_codegen:\n"
                               "  - abs\n  - nolib::frob\nsupported:\nfallback:\n  - nolib::knob\n")
    root = make_root(tmp_path / "root", lowerings="def lower_abs(self):\n    return self\n",
                     shape_fns="def abs_output_shape(self):\n    return self\n", impls="")
    monkeypatch.setattr(gen, "render", functools.partial(gen.render, root=root))
    out = tmp_path / "pkg"
    assert gen.main(["--manifest", str(manifest), "--out", str(out)]) == 0
    err = capsys.readouterr().err.replace(str(tmp_path), "<tmp>")
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"warning: skipping nolib::frob, nolib::knob: importing 'no_such_module_for_tests' "
                                  f"failed ({error}); they are registered only once the package is regenerated")
    registry = (out / "registry.py").read_text()
    assert "LIBRARY_OPS = {\n}" in registry
    assert f'    "nolib::frob": "importing \'no_such_module_for_tests\' failed ({error})",\n' in registry
    assert "nolib" not in (out / "dispatch.py").read_text()
    assert (len(library_cache) == 1) == (module_text is not None)  # a module not found needs no subprocess


@pytest.mark.parametrize("section, entry, message", [
    ("fallback", "otherlib::op",
     "<tmp>/manifest.yaml:5: 'otherlib::op' is in namespace 'otherlib', which 'libraries' does not name; add "
     "'libraries: {otherlib: <the module that registers otherlib:: operators>}' to the manifest"),
    ("fallback", "aten::abs", "<tmp>/manifest.yaml:5: write aten operators without their namespace: 'abs'"),
    ("fallback", "testlib::halfs",
     "<tmp>/manifest.yaml:5: unknown operator 'testlib::halfs' (after importing custom_op_library); "
     "did you mean testlib::halves?"),
    ("full_codegen", "testlib::add_into",
     "<tmp>/manifest.yaml:5: 'testlib::add_into' writes into its arguments (mutable); a lowering only returns new "
     "values, so list it under `supported` (handwritten impl_*) or `fallback`"),
])
def test_library_entry_errors(tmp_path, library_cache, section, entry, message):
    others = [f"{k}:" for k in ("full_codegen", "supported", "fallback") if k != section]
    lines = ["backend: XLA", "libraries:", "  testlib: custom_op_library", f"{section}:", f"  - {entry}"] + others
    assert render_error(tmp_path, "\n".join(lines) + "\n", make_root(tmp_path / "root")) == message


def test_libraries_must_map_namespaces_to_modules(tmp_path):
    from codegen.manifest import load_manifest

    for libraries, message in (
        ("libraries: [testlib]", "<tmp>/manifest.yaml:2: 'libraries' must map a namespace to the module that "
                                 "defines it, like 'libraries: {torchvision: torchvision}'"),
        ("libraries: {aten: torch}", "<tmp>/manifest.yaml:2: 'aten' is not a library namespace (a Python "
                                     "identifier other than aten)"),
        ("libraries: {testlib: not a module}", "<tmp>/manifest.yaml:2: library 'testlib' must name a Python "
                                               "module to import, like 'torchvision'"),
    ):
        path = write(tmp_path, f"backend: XLA\n{libraries}\nfull_codegen:\nsupported:\nfallback:\n")
        with pytest.raises(ManifestError) as info:
            load_manifest(path)
        assert str(info.value).replace(str(tmp_path), "<tmp>") == message


def test_library_functions_are_checked_like_aten_ones(tmp_path, library_cache):
    lowerings = LOWERINGS.replace("def lower_testlib_mix(xs, bias, dim, scale, square, offset)",
                                  "def lower_testlib_mix(xs, bias, dim, scale, offset)")
    root = make_root(tmp_path / "root", lowerings=lowerings, shape_fns=SHAPE_FNS.split("\n\n\ndef testlib_halves")[0])
    message = render_error(tmp_path, MANIFEST, root)
    assert (
        "1 handwritten function(s) are missing:\n"
        "  <tmp>/manifest.yaml:6: testlib::halves needs, in shape_fns/<family>.py:\n"
        "      def testlib_halves_output_shape(x, dim):\n"
    ) in message
    assert (
        "  lowerings/testlib.py:6: lower_testlib_mix does not match the schema of testlib::mix (testlib::mix(Tensor[] "
        "xs, Tensor? bias, int dim, float scale, bool square, Scalar offset) -> Tensor):\n"
        "      - positional parameters are (xs, bias, dim, scale, offset), the schema has (xs, bias, dim, scale, "
        "square, offset)\n"
    ) in message


# ------------------------------------------------------------ a generated package, in a subprocess

FULL_MANIFEST = """\
backend: XLA
libraries:
  nolib: no_such_module_for_tests
  testlib: custom_op_library
full_codegen:
  - abs
  - nolib::frob
  - testlib::halves
  - testlib::mix
supported:
fallback:
  - testlib::unlowered
""" + "internal:" + (REPO / "native_functions.yaml").read_text().split("\ninternal:")[1].split("\nfallback:")[0]


@pytest.fixture(scope="module")
def generated_package(tmp_path_factory):
    """A package generated from FULL_MANIFEST with the repo's runtime and lowerings plus
    the testlib ones, importable as `xla_native_functions` from the returned folder."""
    tmp = tmp_path_factory.mktemp("package")
    src = tmp / "src"
    for folder, extra in (("lowerings", LOWERINGS), ("shape_fns", SHAPE_FNS)):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
        (src / folder / "testlib.py").write_text(extra)
    (src / "runtime").symlink_to(REPO / "runtime")
    manifest = write(tmp, FULL_MANIFEST)
    result = gen.render(manifest, root=src)
    assert result.unavailable == {"nolib::frob": "importing 'no_such_module_for_tests' failed "
                                                 "(ModuleNotFoundError: No module named 'no_such_module_for_tests')"}
    package = tmp / "site" / "xla_native_functions"
    gen.write_atomically(result.files, package)
    for folder in ("lowerings", "shape_fns", "runtime"):
        (package / folder).symlink_to(src / folder)
    return tmp / "site"


def run_script(site: Path, script: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(TESTS)]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_library_loaded_after_the_package_is_picked_up_on_first_use(generated_package):
    out = run_script(generated_package, """
        import torch
        import xla_native_functions as xnf
        from xla_native_functions.runtime.exec import custom_ops
        assert xnf.__file__.startswith(%r), xnf.__file__
        assert "custom_op_library" not in __import__("sys").modules
        assert sorted(custom_ops._PENDING) == ["testlib::halves", "testlib::mix", "testlib::unlowered"]

        import custom_op_library as lib
        torch.manual_seed(0)
        x = torch.randn(4, 6)
        X = xnf.to_xla(x)
        # the first call of an operator registers it
        out = lib.mix([X, X.abs()], None, 1, 0.5, True, 2)
        assert torch.allclose(xnf.to_torch(out), lib.mix([x, x.abs()], None, 1, 0.5, True, 2))
        assert "testlib::mix" not in custom_ops._PENDING
        first, second = lib.halves(X, 1)
        ref = lib.halves(x, 1)
        assert torch.equal(xnf.to_torch(first), ref[0]) and torch.equal(xnf.to_torch(second), ref[1])
        assert second.dtype == torch.bool
        # a `fallback` entry runs the library's CPU kernel
        assert torch.equal(xnf.to_torch(lib.unlowered(X)), x + 1)
        from xla_native_functions.runtime.platform.metrics import metrics
        assert metrics.fallback_calls == {"testlib.unlowered.default": 1}, metrics.fallback_calls
        assert not custom_ops._PENDING

        # an entry whose library could not be imported when the package was generated
        @torch.library.custom_op("nolib::frob", mutates_args=(), device_types="cpu")
        def frob(x: torch.Tensor) -> torch.Tensor:
            return x * 3
        try:
            frob(X)
        except xnf.OperatorNotFound as e:
            print(e)
        else:
            raise AssertionError("no OperatorNotFound")
    """ % str(generated_package))
    assert re.fullmatch(
        r"operator 'nolib::frob', called from <string>:\d+ \(<module>\), is listed in native_functions.yaml but "
        r"not registered: importing 'no_such_module_for_tests' failed \(ModuleNotFoundError: No module named "
        r"'no_such_module_for_tests'\)\. Fix that and run `python -m codegen.generate`, or register a lowering at "
        r"run time with xla_native_functions.register_lowering\('nolib::frob', lowering\) \(docs/custom_ops.md\); "
        r"or set xla_native_functions.config.allow_cpu_fallback = True to run it on CPU.\n", out), out


def test_library_loaded_before_the_package_is_registered_at_import_and_compiles(generated_package):
    run_script(generated_package, """
        import torch
        import custom_op_library as lib
        import xla_native_functions as xnf
        from xla_native_functions.runtime.exec import custom_ops
        from xla_native_functions.runtime.platform.metrics import metrics
        assert not custom_ops._PENDING
        torch.manual_seed(0)
        x, y = torch.randn(3, 5), torch.randn(3, 5)
        step = xnf.compile(lambda a, b: lib.halves(lib.mix([a, b.abs()], None, 0, 2.0, False, 1.5), 0))
        X, Y = xnf.to_xla(x), xnf.to_xla(y)
        ref = lib.halves(lib.mix([x, y.abs()], None, 0, 2.0, False, 1.5), 0)
        for _ in range(3):
            first, second = step(X, Y)
            assert torch.allclose(xnf.to_torch(first), ref[0]) and torch.equal(xnf.to_torch(second), ref[1])
        assert metrics.replays == 1, xnf.metrics_report()
    """)


def test_library_loaded_after_the_package_is_picked_up_by_torch_compile(generated_package):
    run_script(generated_package, """
        import torch
        import xla_native_functions as xnf
        import custom_op_library as lib
        x = torch.randn(4, 6)
        f = torch.compile(lambda x: lib.halves(lib.mix([x], None, 1, 1.0, False, 0.5), 1)[0], backend="xla_native")
        assert torch.allclose(f(x), lib.halves(lib.mix([x], None, 1, 1.0, False, 0.5), 1)[0])
        assert "graph splits: none" in xnf.dynamo_report(), xnf.dynamo_report()
    """)


# ============================================================ run-time registration

TRACES: collections.Counter = collections.Counter()  # how often JAX traced each lowering


def lower_mix(xs, bias, dim, scale, square, offset):
    TRACES["mix"] += 1
    out = jnp.stack(xs).sum(0) * scale
    if square:
        out = out * out
    if bias is not None:
        out = out + bias
    return jnp.cumsum(out + offset, axis=dim, dtype=out.dtype)


def lower_halves(x, dim):
    first, second = jnp.split(x, [(x.shape[dim] + 1) // 2], axis=dim)
    return first * 2, second > 0


def lower_scaled_tanh(x, alpha):
    return jnp.tanh(x) * alpha


def lower_rms_norm(x, *, eps):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + eps)


def lower_chunks(x, n):
    size = -(-x.shape[0] // n)
    return [x[i:i + size] for i in range(0, x.shape[0], size)]


def lower_no_fake(x):
    return jnp.flip(x, 0)


def no_fake_shape(x):
    return torch.empty_like(x)


@pytest.fixture(scope="module", autouse=True)
def registered():
    xnf.register_lowering("testlib::mix", lower_mix)
    xnf.register_lowering(lib.halves, lower_halves)
    xnf.register_lowering(torch.ops.testlib.scaled_tanh.default, lower_scaled_tanh)
    xnf.register_lowering("testlib::rms_norm", lower_rms_norm)
    xnf.register_lowering("testlib::chunks", lower_chunks)
    xnf.register_lowering("testlib::no_fake", lower_no_fake, shape_fn=no_fake_shape)


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(graph, "_GRAPH_CACHE", {})
    monkeypatch.setattr(graph, "_LAST_KEYS", {})
    xnf.reset_metrics()


def inputs(*shapes, seed=0):
    torch.manual_seed(seed)
    cpu = [torch.randn(*s) for s in shapes]
    return cpu, [xnf.to_xla(t) for t in cpu]


def cpu(t):
    return xnf.to_torch(t)


@pytest.mark.parametrize("with_bias", [True, False])
def test_eager_matches_cpu_and_scalars_do_not_recompile(with_bias):
    n = 4 if with_bias else 5  # shapes of their own: nothing compiled before
    (a, b, c), (A, B, C) = inputs((3, n), (3, n), (n,), seed=int(with_bias))
    before = TRACES["mix"]
    for offset in (1.5, 2.5, -3.0):
        out = lib.mix([A, B], C if with_bias else None, 1, 0.5, True, offset)
        ref = lib.mix([a, b], c if with_bias else None, 1, 0.5, True, offset)
        assert out.dtype == ref.dtype and out.shape == ref.shape and out.stride() == ref.stride()
        torch.testing.assert_close(cpu(out), ref)
    assert TRACES["mix"] == before + 1  # a Scalar is a runtime operand
    torch.testing.assert_close(cpu(lib.mix([A, B], None, 0, 0.5, True, 1.5)), lib.mix([a, b], None, 0, 0.5, True, 1.5))
    assert TRACES["mix"] == before + 2  # a static attribute is part of the key


def test_eager_views_and_keyword_only_attributes():
    (y,), (Y,) = inputs((12, 6))
    # a transposed view, a view at an offset, a row as the bias
    torch.testing.assert_close(cpu(lib.mix([Y[:6].t(), Y[6:]], Y[1], 0, 1.0, False, 0)),
                               lib.mix([y[:6].t(), y[6:]], y[1], 0, 1.0, False, 0))
    (x,), (X,) = inputs((6, 5))
    torch.testing.assert_close(cpu(lib.rms_norm(X, eps=0.5)), lib.rms_norm(x, eps=0.5))
    torch.testing.assert_close(cpu(lib.rms_norm(X)), lib.rms_norm(x))


def test_two_results_and_a_list_of_results():
    (x,), (X,) = inputs((4, 7))
    for dim in (1, 0, -1):
        got, ref = lib.halves(X, dim), lib.halves(x, dim)
        assert isinstance(got, tuple) and [t.dtype for t in got] == [torch.float32, torch.bool]
        assert torch.equal(cpu(got[0]), ref[0]) and torch.equal(cpu(got[1]), ref[1])
    got, ref = lib.chunks(X, 3), lib.chunks(x, 3)
    assert isinstance(got, list) and len(got) == len(ref) == 2
    for g, r in zip(got, ref):
        assert torch.equal(cpu(g), r)


def test_shape_fn_stands_in_for_a_missing_fake_kernel():
    (x,), (X,) = inputs((3, 2))
    assert torch.equal(cpu(lib.no_fake(X)), x.flip(0))
    with pytest.raises(ValueError) as info:
        xnf.register_lowering("testlib::no_fake", lower_no_fake, replace=True)
    assert str(info.value) == (
        "'testlib::no_fake' has no fake (meta) kernel to give its output shapes: register one with "
        "torch.library.register_fake('testlib::no_fake'), or pass shape_fn= to register_lowering")


def test_compiled_replays_on_the_third_call():
    (a, b, c), (A, B, C) = inputs((3, 4), (3, 4), (4,))

    def step(a, b, c):
        first, second = lib.halves(lib.mix([a, b], c, 1, 0.5, True, 2.5), 0)
        return lib.scaled_tanh(first, 2.0), second

    compiled = xnf.compile(step)
    for _ in range(3):
        got, ref = compiled(A, B, C), step(a, b, c)
        torch.testing.assert_close(cpu(got[0]), ref[0])
        assert torch.equal(cpu(got[1]), ref[1])
    assert metrics.replays == 1, xnf.metrics_report()


def test_lazy_mode_records_nodes_and_runs_them_as_one_graph():
    (a, b), (A, B) = inputs((3, 4), (3, 4))
    with xnf.lazy_mode():
        out = lib.mix([A, B], None, 0, 1.5, False, 2) + 1
        pending = out._store.pending
        node = pending.node.args[0].node
        assert isinstance(pending, Value) and node.op == "testlib::mix"
        assert node.section == "registered"
        xnf.mark_step()
    torch.testing.assert_close(cpu(out), lib.mix([a, b], None, 0, 1.5, False, 2) + 1)


def test_torch_compile_graph_runs_the_lowering_without_splits():
    torch._dynamo.reset()
    dynamo.reset_dynamo_stats()
    (a, b, c), _ = inputs((3, 4), (3, 4), (4,))

    def fn(a, b, c):
        y = lib.mix([a, b.sin()], c, 1, 0.5, True, 2.0)
        first, second = lib.halves(y, 1)
        return lib.rms_norm(first) * second.sum()

    compiled = torch.compile(fn, backend="xla_native")
    torch.testing.assert_close(compiled(a, b, c), fn(a, b, c))
    report = xnf.dynamo_report()
    assert "graph splits: none" in report and "0 partitioned" in report, report
    torch._dynamo.reset()


def test_backward_runs_the_registered_autograd_formula():
    torch.manual_seed(0)
    x = torch.randn(5, 3, requires_grad=True)
    X = xnf.to_xla(x.detach()).requires_grad_()
    (lib.scaled_tanh(x, 1.5) ** 2).sum().backward()
    (lib.scaled_tanh(X, 1.5) ** 2).sum().backward()
    torch.testing.assert_close(cpu(X.grad), x.grad)

    # compiled, with the backward in the traced step
    def step(t):
        t.grad = None
        loss = (lib.scaled_tanh(t, 0.5) * t).sum()
        loss.backward()
        return loss.detach()

    compiled = xnf.compile(step)
    for _ in range(3):
        compiled(X)
    step(x)
    torch.testing.assert_close(cpu(X.grad), x.grad)
    # torch.compile: AOTAutograd traces the formula into the backward graph
    torch._dynamo.reset()
    x.grad = None
    g = torch.compile(lambda t: lib.scaled_tanh(t, 3.0).sum(), backend="xla_native")
    g(x).backward()
    ref = x.grad.clone()
    x.grad = None
    lib.scaled_tanh(x, 3.0).sum().backward()
    torch.testing.assert_close(ref, x.grad)
    torch._dynamo.reset()


def test_device_agnostic_custom_op_runs_its_body_until_a_lowering_is_registered():
    (x,), (X,) = inputs((4, 3))
    traces = []

    def lower_softplus(x):
        traces.append(x.shape)
        return jnp.log1p(jnp.exp(x))

    # its body's aten ops run on JAX one by one
    torch.testing.assert_close(cpu(lib.softplus_any(X)), lib.softplus_any(x))
    assert metrics.op_calls[torch.ops.aten.log1p.default] == 1 and not traces
    xnf.register_lowering("testlib::softplus_any", lower_softplus)
    xnf.reset_metrics()
    torch.testing.assert_close(cpu(lib.softplus_any(X)), lib.softplus_any(x))
    assert traces == [(4, 3)] and torch.ops.aten.log1p.default not in metrics.op_calls


def test_an_operator_without_a_lowering_raises_operator_not_found():
    (_,), (X,) = inputs((2,))
    with pytest.raises(xnf.OperatorNotFound) as info:
        lib.unlowered(X)
    assert re.fullmatch(
        r"operator 'testlib::unlowered', called from .*test_custom_ops.py:\d+ \(lib.unlowered\(X\)\), has no lowering "
        r"to JAX\. Register one with xla_native_functions.register_lowering\('testlib::unlowered', lowering\) "
        r"\(docs/custom_ops.md\), or list it in native_functions.yaml with its library under `libraries:`; or set "
        r"xla_native_functions.config.allow_cpu_fallback = True to run it on CPU\.", str(info.value)), str(info.value)


def test_a_library_operator_whose_schema_changed_is_not_registered(monkeypatch):
    """A manifest entry generated for another schema of the operator (the library was
    upgraded since): the package warns at import and the operator names the cause."""
    monkeypatch.setattr(custom_ops, "_PENDING", {})
    monkeypatch.setattr(custom_ops, "_UNAVAILABLE", {})

    def stub(*args, **kwargs):
        raise AssertionError("a stub generated for another schema ran")

    generated_for = "testlib::unlowered(Tensor x, int n) -> Tensor"
    with pytest.warns(
        UserWarning,
        match=re.escape(
            "xla_native_functions: testlib::unlowered is not registered: its schema is now testlib::unlowered(Tensor "
            "x) "
            f"-> Tensor, but the package was generated for {generated_for}; run `python -m codegen.generate` again"
        ),
    ):
        custom_ops.install_library_ops({"testlib::unlowered": (generated_for, stub)}, {})
    (_,), (X,) = inputs((2,))
    with pytest.raises(xnf.OperatorNotFound, match=r"operator 'testlib::unlowered', called from .*, is listed in "
                                                   r"native_functions.yaml but not registered: its schema is now"):
        lib.unlowered(X)


# ------------------------------------------------------------ registration errors


def test_registering_twice_names_the_first_registration_and_replace():
    with pytest.raises(ValueError, match=r"a lowering of 'testlib::mix' is already registered \(at .*test_custom_ops"
                                         r"\.py:\d+ .*\); pass replace=True to replace it"):
        xnf.register_lowering("testlib::mix", lower_mix)
    (x,), (X,) = inputs((2, 3))
    xnf.register_lowering("testlib::halves", lambda x, dim: (x[:1] * 3, x[1:] > 0), replace=True)
    try:
        assert torch.equal(cpu(lib.halves(X, 0)[0]), x[:1] * 3)
    finally:
        xnf.register_lowering("testlib::halves", lower_halves, replace=True)
    assert torch.equal(cpu(lib.halves(X, 0)[0]), x[:1] * 2)


@pytest.mark.parametrize(
    "op, error, message",
    [
        (
            "testlib::nothing",
            ValueError,
            "no operator 'testlib::nothing' is registered with torch: define it first (torch.library.custom_op, or "
            "import "
            "the library that defines it), then register its lowering",
        ),
        (
            "nothing",
            ValueError,
            "'nothing' is not an operator name: name it 'namespace::name' or 'namespace::name.overload'",
        ),
        (
            "testlib::twice",
            ValueError,
            "'testlib::twice' has the overloads testlib::twice.a, testlib::twice.b: register one of them by that name",
        ),
        (
            torch.ops.testlib.twice,
            ValueError,
            "'testlib::twice' has the overloads a, b: register one of them, like 'testlib::twice.a'",
        ),
        (
            "aten::relu",
            ValueError,
            "'aten::relu' is an aten operator: aten operators are listed in native_functions.yaml (README, \"Adding an "
            "op\"); register_lowering is for operators of other namespaces",
        ),
        (
            "testlib::add_into",
            ValueError,
            "'testlib::add_into' writes into its arguments (testlib::add_into(Tensor(a0!) x, Tensor y) -> ()); a "
            "lowering "
            "only returns new values, so register_lowering takes functional operators only",
        ),
        (
            "testlib::count_positive",
            ValueError,
            "'testlib::count_positive' returns int (testlib::count_positive(Tensor x) -> SymInt); register_lowering "
            "takes operators that return tensors",
        ),
        (3, TypeError, "register_lowering takes an operator name like 'mylib::op', or its OpOverload; got 3"),
    ],
)
def test_bad_operator(op, error, message):
    with pytest.raises(error) as info:
        xnf.register_lowering(op, lambda x: x)
    assert str(info.value) == message


def lower_unlowered_positional(x, y):
    return x


def lower_unlowered_varargs(*args):
    return args[0]


def lower_rms_positional(x, eps):
    return x


@pytest.mark.parametrize("op, lowering, problems", [
    ("testlib::unlowered", lower_unlowered_positional,
     "its positional parameters are (x, y), the schema's are (x). Expected: def lower_unlowered_positional(x)"),
    ("testlib::unlowered", lower_unlowered_varargs,
     "it uses *args/**kwargs; list the schema's parameters explicitly; its positional parameters are (), the "
     "schema's are (x). Expected: def lower_unlowered_varargs(x)"),
    ("testlib::rms_norm", lower_rms_positional,
     "its positional parameters are (x, eps), the schema's are (x); its keyword-only parameters are (), the "
     "schema's are (eps). Expected: def lower_rms_positional(x, *, eps)"),
])
def test_lowering_must_take_the_schema_parameters(op, lowering, problems):
    with pytest.raises(TypeError) as info:
        xnf.register_lowering(op, lowering, replace=True)
    schema = str(getattr(torch.ops.testlib, op.split("::")[1]).default._schema)
    assert str(info.value) == (f"the lowering '{lowering.__name__}' does not match the schema of {op} ({schema}): "
                               + problems)


def _bad_shape(y):
    return y


def test_shape_fn_must_take_the_schema_parameters():
    with pytest.raises(TypeError) as info:
        xnf.register_lowering("testlib::twice.a", lambda x: x, shape_fn=_bad_shape)
    assert str(info.value) == (
        "the shape_fn '_bad_shape' does not match the schema of testlib::twice.a (testlib::twice.a(Tensor x) -> "
        "Tensor): its positional parameters are (y), the schema's are (x). Expected: def _bad_shape(x)")


def test_a_lowering_that_disagrees_with_the_fake_kernel_raises_when_run():
    xnf.register_lowering("testlib::twice.b", lambda x, n: (x * 2 * n).astype(jnp.float64))
    (x,), (X,) = inputs((3,))
    with pytest.raises(TypeError, match=re.escape(
            "returned output 0 as ((3,), torch.float64), but the fake (meta) kernel of testlib::twice.b says "
            "((3,), torch.float32): fix whichever disagrees with the operator's PyTorch implementation")):
        torch.ops.testlib.twice.b(X, 2)
    xnf.register_lowering("testlib::twice.b", lambda x, n: x * 2 * n, replace=True)
    assert torch.equal(cpu(torch.ops.testlib.twice.b(X, 2)), torch.ops.testlib.twice.b(x, 2))


# ============================================================ docs/custom_ops.md


def test_the_documented_example_runs():
    text = (REPO / "docs" / "custom_ops.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/custom_ops.md has no python example"
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
