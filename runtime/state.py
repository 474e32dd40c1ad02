"""Process-wide execution state, read on every op (module attributes: the cheapest lookup)."""

# True while ops are recorded into IR instead of executed (compile(), lazy mode).
tracing = False
# The trace being recorded (runtime.lazy.Trace) while `tracing` is True.
trace = None
# The tensors an in-place foreach op writes, while its functional form computes (Note
# [Foreach ops] in runtime/supported/foreach.py).
foreach_into = None
