"""The platform layer: settings, counters, and how JAX and PyTorch are configured for
this package. It imports nothing else of the runtime; every other layer imports it first,
so the process-wide settings below are made before anything creates JAX's CPU client."""

from .backend import (guard_compiled_code, keep_freed_memory_mapped, prefer_inline_cpu_execution,
                      prefer_sequential_schedule, use_persistent_compilation_cache)
from .fork_guard import install as install_fork_guard

prefer_inline_cpu_execution()  # Note [Inline CPU execution]
prefer_sequential_schedule()  # Note [Sequential XLA CPU schedule]
keep_freed_memory_mapped()  # Note [Host allocator]
guard_compiled_code()  # Note [Mappings of compiled code]
use_persistent_compilation_cache()  # Note [Persistent compilation cache]
install_fork_guard()  # Note [Fork after JAX started]
