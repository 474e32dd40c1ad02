"""The handwritten runtime, in layers that import only downwards (docs/architecture.md):

    platform   settings, counters, JAX/PyTorch configuration, device guard
    core       tensor and storage, views, IR values, conversions, the thread's context
    exec       op registry, running one op eagerly, views and writes, CPU fallback, traces and graphs
    frontends  the torch dispatch entry, compile()/replay, lazy mode, Dynamo, interop, environment, debug
    supported  implementations of the manifest's `supported` ops (beside frontends, on exec)
    api        the public names, and `install`, which the generated package calls at import
"""
