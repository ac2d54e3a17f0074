"""One allocation for the fp32 buffers of a call that live and die together.

On the H200's host a `torch.empty` on the GPU cost 3-7 us and a view of a flat buffer (`as_strided`)
about half that (docs/notes.md, session 11); a forward or backward call allocates 6-15 of them, and
on the small rows (m2) the host's issue time is the wall time. The buffers share one lifetime
already: the forward's are saved together for the backward, or all freed when it returns.
One price: PyTorch's caching allocator hands a large request a whole number of 2 MiB and does not
split off a remainder of 1 MiB or less, so a workspace whose size is just under a 2 MiB multiple
is charged up to 1 MiB more in the peak-memory statistics than separate tensors would be (the
backward's two buffers stay separate for this reason: m2's peak had reached FLA's + 1 MiB)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

ALIGN = 128  # elements: 512 bytes, what PyTorch's CUDA allocator gives each allocation


class Workspace:
    """Named C-contiguous shapes at ALIGN-aligned offsets of one flat buffer; shapes given as None
    are left out (and come back as None)."""

    def __init__(self, shapes: Iterable[tuple[str, tuple[int, ...] | None]]) -> None:
        self.views: list[tuple[str, tuple[int, ...], tuple[int, ...], int]] = []
        self.absent: list[str] = []
        offset = 0
        for name, shape in shapes:
            if shape is None:
                self.absent.append(name)
                continue
            strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
            self.views.append((name, shape, strides, offset))
            offset += -(-math.prod(shape) // ALIGN) * ALIGN
        self.numel = offset

    def carve(self, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor | None]:
        buf = torch.empty(self.numel, dtype=dtype, device=device)
        out: dict[str, torch.Tensor | None] = {
            name: buf.as_strided(shape, strides, offset)
            for name, shape, strides, offset in self.views
        }
        out.update(dict.fromkeys(self.absent))
        return out
