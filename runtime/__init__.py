"""The handwritten runtime: tensor, environment, eager and traced execution, views,
CPU fallback and metrics. The generated package calls `install` at import."""

from .dispatch import install

__all__ = ["install"]
