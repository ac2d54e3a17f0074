"""Deterministic KDA (Kimi Delta Attention) training ops."""

from .api import chunk_kda

__all__ = ["chunk_kda"]
