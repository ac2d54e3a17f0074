"""CPU: cake/kda/workspace.py, one allocation carved into the named fp32 buffers of a call."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from cake.kda.workspace import ALIGN, Carved, Workspace


def test_views_are_contiguous_aligned_and_disjoint():
    ws = Workspace([("a", (3, 5)), ("none", None), ("b", (2, 64, 64)), ("c", (7,))])
    buf = ws.carve(torch.float32, torch.device("cpu"))
    assert buf["none"] is None and set(buf) == {"a", "b", "c", "none"}
    views = [buf[n] for n in ("a", "b", "c")]
    assert [tuple(t.shape) for t in views] == [(3, 5), (2, 64, 64), (7,)]
    spans = []
    for t in views:
        assert t.is_contiguous() and t.dtype == torch.float32
        assert t.storage_offset() % ALIGN == 0
        spans.append((t.storage_offset(), t.storage_offset() + t.numel()))
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(spans))
    for i, t in enumerate(views):  # writes to one view land in it alone
        t.fill_(float(i))
    assert [float(t.min()) for t in views] == [float(t.max()) for t in views] == [0.0, 1.0, 2.0]
    assert views[0].untyped_storage().data_ptr() == views[2].untyped_storage().data_ptr()


def test_each_carve_is_a_fresh_allocation():
    ws = Workspace([("a", (4,))])
    first = ws.carve(torch.float32, torch.device("cpu"))["a"]
    second = ws.carve(torch.float32, torch.device("cpu"))["a"]
    assert first.data_ptr() != second.data_ptr()


def test_addresses_match_the_views_and_extras_pass_through():
    ws = Workspace([("a", (3, 5)), ("none", None), ("b", (2, 7))])
    extra = torch.arange(4.0)
    carved = ws.carve(torch.float32, torch.device("cpu"), dict(x=extra, gone=None))
    assert carved.ptr("a") == carved["a"].data_ptr() and carved.ptr("b") == carved["b"].data_ptr()
    assert carved.ptr("none") is None and carved["none"] is None
    assert carved.ptr("x") is extra and carved["x"] is extra and carved.ptr("gone") is None
    assert list(carved) == ["a", "b", "none", "x", "gone"] and len(carved) == 5
    with pytest.raises(KeyError):
        carved.ptr("missing")
    with pytest.raises(KeyError):
        carved["missing"]


def test_rebuilt_from_what_autograd_saves_is_the_same_workspace():
    ws = Workspace([("a", (3, 5)), ("b", (2, 7))])
    carved = ws.carve(torch.float32, torch.device("cpu"), dict(x=torch.ones(2)))
    carved["b"].fill_(7.0)
    again = Carved.rebuilt(carved.layout, tuple(carved.extra), carved.tensors())
    assert again.ptr("b") == carved.ptr("b") and torch.equal(again["b"], carved["b"])
    assert again["x"] is carved["x"]
