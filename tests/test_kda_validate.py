"""chunk_kda rejects bad input before any launch, naming the argument (CPU: no GPU needed, since
the device check comes last)."""

from __future__ import annotations

import re

import pytest
import torch

from cake.kda import chunk_kda

B, T, H, K = 1, 10, 2, 128


def inputs(**over):
    base = dict(
        q=torch.randn(B, T, H, K).bfloat16(),
        k=torch.randn(B, T, H, K).bfloat16(),
        v=torch.randn(B, T, H, K).bfloat16(),
        g=-torch.rand(B, T, H, K),
        beta=torch.rand(B, T, H).bfloat16(),
    )
    base.update(over)
    return base


CASES = {
    "q-fp32": (dict(q=torch.randn(B, T, H, K)), TypeError, "q must have dtype"),
    "k-not-tensor": (dict(k=[1, 2]), TypeError, "k must be a torch.Tensor"),
    "g-bf16-without-raw-gate": (
        dict(g=torch.randn(B, T, H, K).bfloat16()),
        TypeError,
        "g must have dtype",
    ),
    "beta-int": (
        dict(beta=torch.ones(B, T, H, dtype=torch.int32)),
        TypeError,
        "beta must have dtype",
    ),
    "head-dim-64": (
        dict(q=torch.randn(B, T, H, 64).bfloat16(), k=torch.randn(B, T, H, 64).bfloat16()),
        ValueError,
        "head dim must be 128",
    ),
    "q-3d": (dict(q=torch.randn(T, H, K).bfloat16()), ValueError, "q must be [B, T, H, K]"),
    "k-shape": (
        dict(k=torch.randn(B, T + 1, H, K).bfloat16()),
        ValueError,
        "k must have q's shape",
    ),
    "v-grouped": (
        dict(v=torch.randn(B, T, 2 * H, K).bfloat16()),
        ValueError,
        "v must be [B, T, H, V]",
    ),
    "v-dim": (dict(v=torch.randn(B, T, H, 64).bfloat16()), ValueError, "v head dim"),
    "g-shape": (dict(g=-torch.rand(B, T, H, 1)), ValueError, "g must be [B, T, H, K]"),
    "beta-shape": (
        dict(beta=torch.rand(B, T, H, 1).bfloat16()),
        ValueError,
        "beta must be [B, T, H]",
    ),
    "q-non-contiguous": (
        dict(q=torch.randn(B, H, T, K).bfloat16().transpose(1, 2)),
        ValueError,
        "q must be contiguous",
    ),
    "cu-seqlens-float": (
        dict(cu_seqlens=torch.tensor([0.0, 10.0])),
        TypeError,
        "cu_seqlens must be an int32 or int64",
    ),
    "cu-seqlens-unsorted": (
        dict(cu_seqlens=torch.tensor([0, 6, 4, 10])),
        ValueError,
        "non-decreasing",
    ),
    "cu-seqlens-not-from-zero": (dict(cu_seqlens=torch.tensor([1, 10])), ValueError, "start at 0"),
    "cu-seqlens-past-end": (
        dict(cu_seqlens=torch.tensor([0, 4, 12])),
        ValueError,
        "end at the number of tokens",
    ),
    "cu-seqlens-2d": (dict(cu_seqlens=torch.tensor([[0, 10]])), ValueError, "1-D"),
    "cu-seqlens-batch-2": (
        dict(
            **{n: torch.cat([t, t]) for n, t in inputs().items()}, cu_seqlens=torch.tensor([0, 10])
        ),
        ValueError,
        "batch size must be 1",
    ),
    "cu-seqlens-cpu-alone": (
        dict(cu_seqlens_cpu=torch.tensor([0, 10])),
        ValueError,
        "without cu_seqlens",
    ),
    "h0-dtype": (
        dict(initial_state=torch.zeros(1, H, K, K).bfloat16()),
        TypeError,
        "initial_state must have dtype",
    ),
    "h0-shape": (
        dict(initial_state=torch.zeros(2, H, K, K)),
        ValueError,
        "initial_state must be [N, H, K, V]",
    ),
    "raw-gate-no-A_log": (dict(use_gate_in_kernel=True), ValueError, "A_log is required"),
    "raw-gate-A_log-shape": (
        dict(use_gate_in_kernel=True, A_log=torch.zeros(H + 1)),
        ValueError,
        "A_log must have H",
    ),
    "raw-gate-dt_bias-shape": (
        dict(use_gate_in_kernel=True, A_log=torch.zeros(H), dt_bias=torch.zeros(K)),
        ValueError,
        "dt_bias must have H*K",
    ),
    "A_log-without-raw-gate": (dict(A_log=torch.zeros(H)), ValueError, "A_log is only used"),
    "lower-bound-without-raw-gate": (
        dict(lower_bound=-1.0),
        ValueError,
        "lower_bound is only used",
    ),
    "lower-bound-too-low": (
        dict(use_gate_in_kernel=True, lower_bound=-6.0),
        ValueError,
        "lower_bound must be in [-5, 0)",
    ),
    "lower-bound-zero": (
        dict(use_gate_in_kernel=True, lower_bound=0.0),
        ValueError,
        "lower_bound must be in [-5, 0)",
    ),
    "allow-neg-eigval": (
        dict(allow_neg_eigval=True),
        ValueError,
        "allow_neg_eigval=True is not supported",
    ),
    "intermediate-states": (
        dict(return_intermediate_states=True),
        ValueError,
        "return_intermediate_states",
    ),
    "cp-context": (dict(cp_context=object()), ValueError, "cp_context"),
    "use-graph": (dict(use_graph=True), ValueError, "use_graph"),
    "chunk-size-32": (dict(chunk_size=32), ValueError, "chunk_size must be 64"),
    "unknown-kwarg": (
        dict(head_first=True),
        TypeError,
        "unsupported keyword argument(s): head_first",
    ),
    "max-num-seqs": (
        dict(cu_seqlens=torch.tensor([0, 4, 10]), max_num_seqs=3),
        ValueError,
        "max_num_seqs=3",
    ),
    "safe-gate-no-bound": (
        dict(use_gate_in_kernel=True, safe_gate=True, A_log=torch.zeros(H)),
        ValueError,
        "safe_gate=True",
    ),
    "segments-zero": (dict(segments=0), ValueError, "segments must be None or an int >= 1"),
    "segments-bool": (dict(segments=True), ValueError, "segments must be None or an int >= 1"),
    "segments-float": (dict(segments=2.0), ValueError, "segments must be None or an int >= 1"),
    "cpu-tensors": (dict(), ValueError, "must be on a CUDA device"),
}


@pytest.mark.parametrize("over,error,match", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_rejected_before_launch(over, error, match):
    with pytest.raises(error, match=re.escape(match)):
        chunk_kda(**inputs(**over))


def test_misaligned_views_are_copied_to_aligned_storage():
    """The programs copy rows in 16-byte pieces: a view at an odd element offset into a larger
    tensor is passed on as an aligned copy (same values), an aligned tensor as itself."""
    from cake.kda.validate import ALIGN_BYTES, aligned

    buf = torch.randn(1 + 2 * 128).bfloat16()
    view = buf[1:].view(2, 128)  # 2 bytes past the buffer's start
    assert view.data_ptr() % ALIGN_BYTES != 0
    copy = aligned(view)
    assert copy is not None and copy.data_ptr() % ALIGN_BYTES == 0
    assert torch.equal(copy, view)
    whole = torch.randn(2, 128).bfloat16()
    assert aligned(whole) is whole
    assert aligned(None) is None
