"""The handwritten runtime: tensor, environment, eager and traced execution, views,
CPU fallback and metrics. The generated package calls `install` at import."""

from .backend import (guard_compiled_code, keep_freed_memory_mapped, prefer_inline_cpu_execution,
                      prefer_sequential_schedule, use_persistent_compilation_cache)

# both before anything creates JAX's CPU client
prefer_inline_cpu_execution()  # Note [Inline CPU execution]
prefer_sequential_schedule()  # Note [Sequential XLA CPU schedule]
keep_freed_memory_mapped()  # Note [Host allocator]
guard_compiled_code()  # Note [Mappings of compiled code]
use_persistent_compilation_cache()  # Note [Persistent compilation cache]

from .dispatch import install  # noqa: E402

__all__ = ["install"]
