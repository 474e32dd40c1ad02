"""Process-wide execution state, read on every op (module attributes: the cheapest lookup)."""

# True while ops are recorded into IR instead of executed (compile(), lazy mode).
tracing = False
# The trace being recorded (runtime.lazy.Trace) while `tracing` is True.
trace = None
