"""Small statistics helpers."""

from .core import mean, variance

__all__ = ["mean", "variance"]
