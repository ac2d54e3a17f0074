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
from collections.abc import Iterable, Iterator, Mapping

import torch

ALIGN = 128  # elements: 512 bytes, what PyTorch's CUDA allocator gives each allocation


class Workspace:
    """Named C-contiguous shapes at ALIGN-aligned offsets of one flat buffer; shapes given as None
    are left out (and come back as None)."""

    def __init__(self, shapes: Iterable[tuple[str, tuple[int, ...] | None]]) -> None:
        self.views: dict[str, tuple[tuple[int, ...], tuple[int, ...], int]] = {}
        self.absent: list[str] = []
        offset = 0
        for name, shape in shapes:
            if shape is None:
                self.absent.append(name)
                continue
            strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
            self.views[name] = (shape, strides, offset)
            offset += -(-math.prod(shape) // ALIGN) * ALIGN
        self.numel = offset

    def carve(
        self,
        dtype: torch.dtype,
        device: torch.device,
        extra: dict[str, torch.Tensor | None] | None = None,
    ) -> Carved:
        return Carved(self, torch.empty(self.numel, dtype=dtype, device=device), extra or {})


class Carved(Mapping[str, "torch.Tensor | None"]):
    """A carved workspace, plus named tensors of its own (`extra`): each buffer's address for a
    launch (`ptr`, no tensor built: a view costs about as much as the launch's argument packing),
    and a tensor view on demand (`carved[name]`, for code that reads the buffers). `tensors()`
    is what autograd saves, `rebuilt` the same object from them in the backward."""

    def __init__(
        self, layout: Workspace, flat: torch.Tensor, extra: dict[str, torch.Tensor | None]
    ) -> None:
        self.layout = layout
        self.flat = flat
        self.extra = extra
        self._base = flat.data_ptr()
        self._size = flat.element_size()
        self._seen: dict[str, torch.Tensor] = {}

    def ptr(self, name: str) -> int | torch.Tensor | None:
        """A launch argument: the buffer's address (None where the layout left it out), or the
        extra tensor itself."""
        if name in self.extra:
            return self.extra[name]
        view = self.layout.views.get(name)
        if view is None:
            if name in self.layout.absent:
                return None
            raise KeyError(name)
        return self._base + self._size * view[2]

    def __getitem__(self, name: str) -> torch.Tensor | None:
        if name in self.extra:
            return self.extra[name]
        if name not in self._seen:
            if name in self.layout.absent:
                return None
            shape, strides, offset = self.layout.views[name]  # KeyError for unknown names
            self._seen[name] = self.flat.as_strided(shape, strides, offset)
        return self._seen[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.layout.views
        yield from self.layout.absent
        yield from self.extra

    def __len__(self) -> int:
        return len(self.layout.views) + len(self.layout.absent) + len(self.extra)

    def tensors(self) -> tuple[torch.Tensor | None, ...]:
        return (self.flat, *self.extra.values())

    @classmethod
    def rebuilt(
        cls, layout: Workspace, extra_names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]
    ) -> Carved:
        flat, *extra = tensors
        return cls(layout, flat, dict(zip(extra_names, extra, strict=True)))
