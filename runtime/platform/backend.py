"""How JAX's CPU client runs our executables, chosen before the client exists, how the
host allocator serves XLA's buffers, and how many compiled executables a process keeps.

Note [Inline CPU execution]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
By default JAX's CPU client dispatches asynchronously: an execution whose buffers are
not tiny is handed to a worker thread, and the caller is woken when it is done. On a
2-core machine that hop costs about 40 to 50 us per execution: a relu of 65,536
floats takes 67 us under `jax.jit` (PyTorch: 4 us), and 14 us when run inline. A
replayed `compile()` step is one execution plus about 15 us of Python, so the hop is
its largest fixed cost (the small zoo MLP's inference step: 90 us against 40 us), and
every eager op above the size threshold pays it too. What async dispatch buys back,
Python running ahead of XLA, is worth less than that here.

So importing xla_native_functions sets `jax_cpu_enable_async_dispatch=False` when the
CPU client has not been created yet. It changes when JAX's CPU work runs, never what
it computes. JAX itself does not read that flag from the environment, so we do:
JAX_CPU_ENABLE_ASYNC_DISPATCH=1 keeps asynchronous dispatch. Once the client exists
the setting is fixed for the process; `metrics_report()` says which one is in force.

Note [Sequential XLA CPU schedule]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
XLA CPU orders a program's kernels with a schedule that maximizes concurrency by
default, and its executor then hands independent branches of the program to its
thread pool. On 2 cores each handoff costs more than the small kernels it moves: the
three EmbeddingBags of the medium zoo DLRM, in one jitted function, took 120-130 us
that way and 28-43 us with XLA's memory-optimized schedule, and the model's compiled
inference 0.22-0.34 ms against 0.14 ms (PyTorch: 0.20-0.37 ms; three paired runs).
Large steps, whose matrix products and convolutions use both cores inside each
kernel, measured the same either way (the medium BERT, GPT-2, Llama, T5 and ViT
steps, within the noise of this machine). It is a measured trade, not a rule: one
synthetic program of three small gathers and segment sums ran slower (32-42 against
22 us). The choice is a process-wide XLA flag that jax.jit's compiler_options do not
reach, read when JAX's CPU client is created.

So importing xla_native_functions before that adds
--xla_cpu_enable_concurrency_optimized_scheduler=false to XLA_FLAGS, unless XLA_FLAGS
already sets it (=true keeps XLA's default); `metrics_report()` says which schedule is
in force.

Note [Host allocator]
~~~~~~~~~~~~~~~~~~~~~
XLA CPU takes every output and temporary buffer of an execution from the C allocator.
glibc's defaults return freed memory to the OS eagerly: it maps requests above
M_MMAP_THRESHOLD (at most 32 MB) afresh and unmaps them when freed, and it trims the top
of the heap once more than M_TRIM_THRESHOLD bytes are free there (twice the largest
chunk freed so far, at most 64 MB). A compiled training step frees its old parameters,
gradients and temporaries together, so the next step takes the same memory back from
the kernel one page fault at a time: 277 faults per step in the medium zoo MLP's SGD
step, whose 2.25 ms became 1.55 ms (PyTorch: 2.1 ms) once the memory stayed with the
process. A larger program's temporaries come as one buffer above 32 MB: the medium zoo
BERT's training step faulted 22,000 pages (87 MB) per step with mapped requests up to
32 MB and trimming above 64 MB, and took 187-201 ms; with neither, 159-173 ms (PyTorch:
150-160 ms). PyTorch updates its parameters and gradients in place and does not notice.

So on glibc, importing xla_native_functions turns off mapping requests afresh
(M_MMAP_MAX = 0: every request comes from the heap) and sets M_TRIM_THRESHOLD to 1 GB,
for the whole process: freed memory stays with the process for reuse, as in a caching
allocator, and is returned to the OS only beyond 1 GB free at the top of the heap.
XLA_NATIVE_FUNCTIONS_MALLOC_DEFAULTS=1 keeps glibc's own settings.

Note [Mappings of compiled code]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every XLA CPU executable maps its code and data into the process: about 3.5 mappings
for a small eager op, about 6 for a small jitted function, more for large ones. Linux
caps a process at vm.max_map_count mappings (65,530 by default), and JAX keeps every
executable it compiled; past the cap, LLVM cannot map the next one and the process
dies ("LLVM compilation error: Cannot allocate memory", then a segmentation fault).
Eager mode compiles one executable per op and input signature, so inputs of ever-new
shapes (variable sequence lengths) reach the cap after some ten thousand executables.
So every 64 compiles a JAX compile listener counts the process's mappings, and above
three quarters of the cap it clears JAX's caches (`jax.clear_caches()`, which frees
their executables): what runs next compiles again. `metrics_report()` counts these
clears; padding or bucketing shapes avoids them.

Note [Persistent compilation cache]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Eager mode compiles one small executable per op and input signature, 20 to 50 ms each,
and a process starts with none: the small zoo T5's first AdamW step took 7.2-7.4 s, of
which a second step needs 0.05 s. JAX can keep compiled executables on disk, keyed by
the lowered program, the compile options and the jaxlib version, but leaves that off
and, when on, skips programs that compiled in under a second, which is every eager op.
With the cache on and that threshold at zero, the same first step took 1.7 s in a
later process (about 160 entries, 0.9 MB): what remains is tracing and lowering in
Python.

So importing xla_native_functions points JAX's cache at
XLA_NATIVE_FUNCTIONS_CACHE/jax-compilation-cache (by default
~/.cache/xla_native_functions/jax-compilation-cache) and caches every compile, as
PyTorch's inductor keeps its compiled kernels on disk by default. A cache directory
the user chose for JAX (JAX_COMPILATION_CACHE_DIR, or jax.config before import) is
left as it is, with JAX's thresholds; XLA_NATIVE_FUNCTIONS_NO_COMPILATION_CACHE=1
keeps the cache off; a directory that cannot be created or written leaves it off too.
JAX reads these settings at its first compile in the process, so they apply only if
nothing was compiled before the import. The cache does not evict: delete the directory
to reclaim its space. `metrics_report()` says where the cache is, or why it is off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Mapping
from pathlib import Path

import jax
from jax._src import xla_bridge

from .cache_trust import WITHOUT_CACHE, cache_root, make_private_dirs, no_cache_reason, refusal, refuse

ASYNC_DISPATCH_ENV = "JAX_CPU_ENABLE_ASYNC_DISPATCH"
NO_COMPILATION_CACHE_ENV = "XLA_NATIVE_FUNCTIONS_NO_COMPILATION_CACHE"
MALLOC_DEFAULTS_ENV = "XLA_NATIVE_FUNCTIONS_MALLOC_DEFAULTS"
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h
KEEP_FREED_BYTES = 1 << 30
_allocator = ["glibc's defaults"]


def env_flag(name: str) -> bool:
    """Whether environment variable `name` is set to 1, true, yes or on."""
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


_compilation_cache = ["off"]


def use_persistent_compilation_cache() -> None:
    """Note [Persistent compilation cache]."""
    if env_flag(NO_COMPILATION_CACHE_ENV):
        _compilation_cache[0] = f"off ({NO_COMPILATION_CACHE_ENV} is set)"
        return
    chosen = jax.config.values["jax_compilation_cache_dir"]
    if chosen:
        _compilation_cache[0] = f"{chosen} (JAX's setting, with JAX's thresholds)"
        return
    root = cache_root()
    if root is None:
        _compilation_cache[0] = f"off ({no_cache_reason()})"
        return
    path = root / "jax-compilation-cache"
    reason = refusal(root)  # Note [Trusted cache directory]; nothing is created in a refused directory
    if reason:
        refuse(reason, WITHOUT_CACHE)
        _compilation_cache[0] = f"off ({reason})"
        return
    try:
        make_private_dirs(path)
    except OSError as error:
        _compilation_cache[0] = f"off (cannot create {path}: {error.strerror})"
        return
    reason = refusal(path)
    if reason:
        refuse(reason, "no persistent compilation cache")
        _compilation_cache[0] = f"off ({reason})"
        return
    if not os.access(path, os.W_OK | os.X_OK):
        _compilation_cache[0] = f"off (cannot write to {path})"
        return
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _compilation_cache[0] = str(path)


def compilation_cache_description() -> str:
    """One line for metrics_report(): Note [Persistent compilation cache]."""
    return _compilation_cache[0]


def prefer_inline_cpu_execution() -> None:
    if xla_bridge.backends_are_initialized():
        return
    jax.config.update("jax_cpu_enable_async_dispatch", env_flag(ASYNC_DISPATCH_ENV))


SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"
_schedule = ["XLA's default (concurrency-optimized)"]


def prefer_sequential_schedule() -> None:
    """Note [Sequential XLA CPU schedule]."""
    flags = os.environ.get("XLA_FLAGS", "")
    if SCHEDULER_FLAG in flags:
        _schedule[0] = f"as XLA_FLAGS sets it ({SCHEDULER_FLAG})"
    elif xla_bridge.backends_are_initialized():
        _schedule[0] = "XLA's default (concurrency-optimized): JAX's CPU client existed before import"
    else:
        os.environ["XLA_FLAGS"] = f"{flags} {SCHEDULER_FLAG}=false".strip()
        _schedule[0] = "memory-optimized, run in order"


def schedule_description() -> str:
    """One line for metrics_report(): Note [Sequential XLA CPU schedule]."""
    return _schedule[0]


def keep_freed_memory_mapped() -> None:
    """Note [Host allocator]."""
    if env_flag(MALLOC_DEFAULTS_ENV):
        _allocator[0] = f"glibc's defaults ({MALLOC_DEFAULTS_ENV} is set)"
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # not glibc
        _allocator[0] = "the C library's defaults (no mallopt)"
        return
    if mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES):
        _allocator[0] = "freed memory kept mapped up to 1 GB"


def _mapping_count() -> int:
    with open("/proc/self/maps", "rb") as f:
        return sum(1 for _ in f)


def _mapping_cap() -> int | None:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return None


class CompiledCodeGuard:
    """Note [Mappings of compiled code]."""

    CHECK_EVERY = 64

    def __init__(self):
        self.cap = _mapping_cap()
        self.compiles = 0
        self.clears = 0

    def on_event(self, event: str, duration: float, **kwargs) -> None:
        if event != "/jax/core/compile/backend_compile_duration" or self.cap is None:
            return
        self.compiles += 1
        if self.compiles % self.CHECK_EVERY == 0 and _mapping_count() > self.cap * 3 // 4:
            jax.clear_caches()
            self.clears += 1


compiled_code_guard = CompiledCodeGuard()


def guard_compiled_code() -> None:
    jax.monitoring.register_event_duration_secs_listener(compiled_code_guard.on_event)


def allocator_description() -> str:
    """One line for metrics_report(): Note [Host allocator]."""
    return _allocator[0]


@functools.cache
def executions_run_inline() -> bool:
    """Whether a call of an executable returns only once its results are computed (Note
    [Inline CPU execution]). Asked after the first execution, when the client exists."""
    return jax.default_backend() == "cpu" and not jax.config.values["jax_cpu_enable_async_dispatch"]


def cpu_dispatch_description() -> str:
    """One line for metrics_report(): how executions run, and why."""
    if jax.config.values["jax_cpu_enable_async_dispatch"]:
        if ASYNC_DISPATCH_ENV in os.environ:
            why = f"{ASYNC_DISPATCH_ENV} is set"
        else:
            why = "JAX's CPU client existed before import; import xla_native_functions first to run inline"
        return f"asynchronous: all but the smallest pay a thread hop ({why})"
    return "inline"


# Note [XLA CPU library fusions]
# XLA CPU can hand reductions (and elementwise ops) to its YNNPACK library fusions
# instead of its own emitted loops. For convolutional graphs the reductions win:
# BatchNorm's batch statistics. The medium zoo ResNet's compiled SGD step went from
# 9.5-11.5 ms to 7.0-7.7 ms (PyTorch: about 9 ms) with both kinds. The elementwise kind
# was dropped later, measured in pairs on the same graphs: without it the medium
# ResNet's inference took 0.72x to 0.75x the time (4.2-4.4 against 5.9-6.2 ms; XLA's
# own loops fuse eval BatchNorm's scale and shift, the ReLU and the residual add into
# one pass), its AdamW step 0.93x and 0.94x (AdamW's elementwise chain), its SGD step
# 1.02x to 1.05x; small ResNet rows 0.85x to 1.0x. For the MLP and the transformer
# blocks of scripts/bench_runtime.py the library fusions lose (1.12x and 1.26x pure JAX
# instead of 1.05x and 1.10x), and so they do for a vision transformer, whose only
# convolution cuts the image into patches: the medium zoo ViT's compiled inference took
# 62-76 ms with them and 52-60 ms without (PyTorch: 52-55 ms). So a graph gets them when
# it has more convolutions than matrix products; the torch.compile backend's graphs
# choose the same way (the medium ResNet's SGD step there: 1.52x -> 1.38x inductor's
# time; 15.5 against 18.6 ms, XLA's own convolution kernels replacing YNNPACK's).
# Handing its matrix products to a library (XNNPACK, YNNPACK or oneDNN dot fusions)
# gained nothing measurable on the medium MLP's SGD step, Llama's SGD step or BERT's
# inference.
# Setting the option at all also takes convolutions away from YNNPACK, which XLA's
# defaults give them: on the graphs of scripts/bench_conv.py (PyTorch on one thread, two
# paired runs) the defaults ran ResNet-18's inference at 64x64 in 0.76x PyTorch's time
# against 0.92x-1.04x, but its training step at 224x224 in 1.27x against 0.79x, and a
# UNet block's (64x64 images, 64 channels) in 1.8x against 0.9x: YNNPACK's
# convolutions lose on large images (a 3x3 convolution of 64 channels over 64x64, batch
# 8: 20 against 11 ms, its gradients 82 against 27 ms), so the option stays.
# jax.jit takes these options only at the top level, so per-op eager executables (also
# called inside the user's jax.jit by the interop functions) keep XLA's defaults, as
# does the user's own JAX code.
# The convolution ops of the manifest: graphs with them get library fusions here and
# channels-last values (runtime/exec/channels_last.py).
CONVOLUTION_OPS = frozenset({"convolution", "convolution_backward"})
MATRIX_PRODUCT_OPS = frozenset({
    "mm", "bmm", "addmm", "baddbmm", "addbmm",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
})
# Matrix products stay YNNPACK's (LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT): XLA CPU's own
# kernel reads a transposed right operand very slowly, and every Linear's forward has
# one: (16x4096)·(1024x4096)ᵀ took 10.5 ms against 1.1 ms. The VGG-style row of
# scripts/bench_conv.py (three convolutions, then Linear(4096, 1024)) ran 2.86x PyTorch's
# time through the torch.compile backend in inference and 1.39x with the products in
# YNNPACK; its compile()d inference at batch 128 took 37 against 21 ms. At batch 16,
# where compile() gives that weight transposed (Note [Transposed weights] in
# exec/graph.py), XLA's own kernel was faster: 3.1 against 3.5 ms.
_LIBRARY_FUSIONS = {
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}


def graph_compiler_options(op_counts: Mapping[str, int]) -> dict:
    """XLA options of a compiled graph (`jax.jit(..., compiler_options=)`) with these
    ops (name -> how many nodes)."""
    convolutions = sum(op_counts.get(name, 0) for name in CONVOLUTION_OPS)
    products = sum(op_counts.get(name, 0) for name in MATRIX_PRODUCT_OPS)
    if convolutions <= products or jax.default_backend() != "cpu":
        return {}
    return dict(_LIBRARY_FUSIONS)
