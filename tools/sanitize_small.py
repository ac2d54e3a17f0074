"""A small set for compute-sanitizer: every variant once, ragged lengths, forward and backward on
both paths (saved and replay), then sync; the g form and the fused raw form again with a 1100-token
sequence split into 3 and into 5 segments (kda_cp: local passes, kda_seg_combine, fix-up; at 5 the
combine's walk has four steps and reuses both of its M buffers)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from kda_inputs import make_inputs  # noqa: E402

from cake.kda import chunk_kda  # noqa: E402

for gate, l2n, lb, segments in (
    ("g", False, None, None),
    ("g", True, None, None),
    ("raw", False, None, None),
    ("raw", True, -5.0, None),
    ("g", False, None, 3),
    ("raw", True, -5.0, 3),
    ("g", True, None, 5),
):
    inp = make_inputs(
        lengths=[1, 63, 65, 130, 0] if segments is None else [1, 1100, 65, 0],
        heads=2,
        gate=gate,
        lower_bound=lb,
        l2norm_in_kernel=l2n,
        initial_state=True,
        device="cuda",
    )
    for saved in (True, False):
        leaf = inp.with_grad()
        o, ht = chunk_kda(
            **leaf.as_kwargs(), output_final_state=True, disable_recompute=saved, segments=segments
        )
        torch.autograd.backward((o, ht), (torch.randn_like(o), torch.randn_like(ht)))
        torch.cuda.synchronize()
        assert torch.isfinite(o).all() and torch.isfinite(ht).all()
        for name in leaf.grad_names():
            assert torch.isfinite(getattr(leaf, name).grad).all(), (gate, l2n, saved, name)
print("sanitize_small: ok")
