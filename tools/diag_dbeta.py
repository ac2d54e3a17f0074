"""Where dbeta's error comes from, on the backward GPU test's inputs: the kernel's fp32 dbeta
(before the cast to beta's dtype), the shipped bf16 dbeta, and the float64 reference rounded to bf16
(the floor no bf16 output can beat), whole tensor and worst head."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from kda_inputs import make_inputs  # noqa: E402
from kda_reference import kda_reference_grads, rel_l2, rel_l2_per_head  # noqa: E402
from test_kda_backward_gpu import CASES, RAGGED, config_for, grads_out  # noqa: E402

import cake.kda.backward as bwd  # noqa: E402


def show(label: str, got: torch.Tensor, ref: torch.Tensor) -> str:
    return f"{label} {rel_l2(got, ref):.2e}/{max(rel_l2_per_head(got, ref, 2)):.2e}"


for name, kw in CASES.items():
    seed = zlib.crc32(str(kw).encode()) % 1000
    inp = make_inputs(RAGGED, heads=4, initial_state=True, seed=seed, device="cuda", **kw)
    do, dht = grads_out(inp, seed)
    ref = kda_reference_grads(inp, do, dht)["dbeta"]
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta.float(), inp.A_log, inp.dt_bias)
    d32 = bwd.backward(*args, inp.initial_state, do, dht, config_for(inp))["dbeta"]
    cells = [
        show("fp32", d32, ref),
        show("bf16", d32.to(inp.beta.dtype), ref),
        show("floor", ref.to(inp.beta.dtype), ref),
    ]
    print(f"{name:24s} dbeta whole/worst-head: " + "  ".join(cells), flush=True)
