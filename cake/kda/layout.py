"""Chunk tables: how packed sequences split into 64-token chunks aligned to each sequence start."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

CHUNK = 64


@dataclass(frozen=True)
class Layout:
    cu_seqlens: tuple[int, ...]
    chunks: torch.Tensor  # int32 [NC, 2]: first token, length (1..64)
    seq_chunks: torch.Tensor  # int32 [N, 2]: first chunk, number of chunks (0 for empty sequences)

    @property
    def n_seqs(self) -> int:
        return len(self.cu_seqlens) - 1

    @property
    def n_chunks(self) -> int:
        return int(self.chunks.shape[0])

    @property
    def total_tokens(self) -> int:
        return self.cu_seqlens[-1]


@lru_cache(maxsize=64)
def layout_for(cu_seqlens: tuple[int, ...], device: torch.device) -> Layout:
    chunks: list[tuple[int, int]] = []
    seq_chunks: list[tuple[int, int]] = []
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True):
        first = len(chunks)
        for s in range(start, end, CHUNK):
            chunks.append((s, min(CHUNK, end - s)))
        seq_chunks.append((first, len(chunks) - first))
    return Layout(cu_seqlens, _int32_pairs(chunks, device), _int32_pairs(seq_chunks, device))


def _int32_pairs(rows: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32).reshape(len(rows), 2).to(device)
