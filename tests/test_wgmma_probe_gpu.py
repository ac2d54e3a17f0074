"""GPU (compute capability 9.0): cake/wgmma.cuh's layout, descriptors and fragment map
(docs/wgmma-plan.md), alone: tests/cuda/wgmma_probe.cu multiplies K-major tf32 operands in the
128-byte-swizzled panel layout with wgmma m64n64k8, A from shared memory and A from registers (by
the register map the plan assumes), and writes the accumulators by the assumed fragment map.
Against float64 on TF32-exact inputs, a layout, descriptor or map mistake shows as an O(1) error;
a correct one leaves fp32 accumulation error only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cake.compile import compile_source
from cake.launch import ArgBlock, _cu_launch, _current_stream, ensure_context
from cake.machine import _call, init_driver
from cake.spec import Arch, ArgType

pytestmark = [pytest.mark.sm90]

SOURCE = Path(__file__).parent / "cuda" / "wgmma_probe.cu"
HEADERS = [
    Path(__file__).parent.parent / "generators" / "include" / "cake" / n
    for n in ("cp_async.cuh", "wgmma_layout.cuh", "wgmma.cuh")
]
SMEM = 65536


@pytest.fixture(scope="module")
def probe():  # noqa: ANN201
    # the headers as render inlines them, without their own #include lines
    text = "".join(h.read_text() for h in HEADERS) + SOURCE.read_text()
    source = "".join(ln for ln in text.splitlines(True) if not ln.lstrip().startswith("#include"))
    compiled = compile_source(source, Arch("sm_90a"), "wgmma_probe")
    ensure_context(0)
    driver = init_driver()
    module = _call(driver, driver.cuModuleLoadData(compiled.cubin), "cuModuleLoadData")
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    out = {}
    for name in ("wgmma_probe", "wgmma_probe_rs"):
        fn = _call(driver, driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")
        _call(driver, driver.cuFuncSetAttribute(fn, attr, SMEM), "cuFuncSetAttribute")
        out[name] = int(fn)
    return out


def tf32(x: torch.Tensor) -> torch.Tensor:
    """x with the low 13 mantissa bits cleared: exact in TF32, so rounding mode does not matter."""
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize(
    "kernel", ["wgmma_probe", "wgmma_probe_rs"]
)  # A in shared memory / registers
@pytest.mark.parametrize("panels", [1, 2, 4])  # K = 32, 64, 128: one to four swizzled panels
def test_wgmma_tf32_k_major_swizzled_layout(probe, kernel, panels):  # noqa: ANN001
    K = 32 * panels
    gen = torch.Generator(device="cuda").manual_seed(panels)
    A = tf32(torch.randn(64, K, device="cuda", generator=gen))
    Bt = tf32(torch.randn(64, K, device="cuda", generator=gen))
    D = torch.full((64, 64), float("nan"), device="cuda")
    block = ArgBlock([ArgType.ptr, ArgType.ptr, ArgType.ptr, ArgType.i32], kernel)
    block.set([A, Bt, D, panels])
    stream = _current_stream(0)
    err = _cu_launch()(probe[kernel], 1, 1, 1, 128, 1, 1, SMEM, stream, block.params, None)
    assert err == 0, f"launch failed: CUresult {err}"
    torch.cuda.synchronize()
    ref = A.double() @ Bt.double().T
    rel = ((D.double() - ref).norm() / ref.norm()).item()
    assert rel < 1e-6, f"relative error {rel:.3e}: layout, descriptor or fragment map is wrong"
