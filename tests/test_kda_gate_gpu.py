"""GPU: the gate programs, selected through the real resolver, compiled, cached and launched,
against a float64 reference of the chunk-local cumsum."""

from __future__ import annotations

import pytest
import torch

from cake.kda.layout import CHUNK, layout_for
from cake.kda.stages import gate_cumsum
from cake.spec import GateForm

pytestmark = [pytest.mark.gpu]

LENGTHS = {
    "ragged": [1, 65, 63, 1000, 64, 2],
    "one-token": [1],
    "many-short": [3, 1, 7, 64, 65, 1, 128, 5],
}


def reference(
    x: torch.Tensor, cu: tuple[int, ...], form: GateForm, A_log, dt_bias, lower_bound
) -> torch.Tensor:
    x = x.double()
    if form is GateForm.softplus:
        g = -A_log.double().exp()[None, :, None] * torch.nn.functional.softplus(
            x + dt_bias.double().view(1, *x.shape[1:])
        )
    elif form is GateForm.sigmoid:
        g = lower_bound * torch.sigmoid(
            A_log.double().exp()[None, :, None] * (x + dt_bias.double().view(1, *x.shape[1:]))
        )
    else:
        g = x
    out = torch.empty_like(g)
    for start, end in zip(cu[:-1], cu[1:], strict=True):
        for s in range(start, end, CHUNK):
            e = min(s + CHUNK, end)
            out[s:e] = g[s:e].cumsum(0)
    return out


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.parametrize("lengths", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize(
    "form,x_dtype",
    [
        (GateForm.g, torch.float32),
        (GateForm.softplus, torch.bfloat16),
        (GateForm.softplus, torch.float32),
        (GateForm.sigmoid, torch.bfloat16),
        (GateForm.sigmoid, torch.float32),
    ],
    ids=["g", "softplus-bf16", "softplus-fp32", "sigmoid-bf16", "sigmoid-fp32"],
)
def test_gate_cumsum_matches_float64(lengths, form, x_dtype):
    gen = torch.Generator(device="cuda").manual_seed(sum(lengths))
    H, K = 3, 128
    cu = tuple([0, *torch.tensor(lengths).cumsum(0).tolist()])
    T = cu[-1]
    if form is GateForm.g:
        x = torch.nn.functional.logsigmoid(torch.randn(T, H, K, device="cuda", generator=gen)) / 16
    else:
        x = torch.randn(T, H, K, device="cuda", generator=gen).to(x_dtype)
    A_log = torch.rand(H, device="cuda", generator=gen)
    dt_bias = torch.randn(H * K, device="cuda", generator=gen) * 0.5
    layout = layout_for(cu, torch.device("cuda", 0))
    G = gate_cumsum(x, layout, form, A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0)
    torch.cuda.synchronize()
    ref = reference(x, cu, form, A_log, dt_bias, -5.0)
    assert torch.isfinite(G).all()
    assert rel_l2(G, ref) <= 1e-5


def test_gate_cumsum_extreme_gates():
    """Gates of -1000 per token: the cumsum reaches -64000 and must stay exact to fp32 rounding."""
    cu = (0, 1, 66, 131)
    x = torch.full((131, 2, 128), -1000.0, device="cuda")
    x[::7] = -0.5
    G = gate_cumsum(x, layout_for(cu, torch.device("cuda", 0)), GateForm.g)
    ref = reference(x, cu, GateForm.g, None, None, None)
    assert torch.isfinite(G).all()
    assert rel_l2(G, ref) <= 1e-5
    assert G.min().item() < -50000  # 55 of 64 rows at -1000


def test_gate_cumsum_is_bitwise_reproducible():
    cu = (0, 1000, 1065)
    x = torch.randn(1065, 4, 128, device="cuda").to(torch.bfloat16)
    A_log, dt_bias = torch.rand(4, device="cuda"), torch.randn(512, device="cuda")
    layout = layout_for(cu, torch.device("cuda", 0))
    first = gate_cumsum(x, layout, GateForm.softplus, A_log=A_log, dt_bias=dt_bias)
    for _ in range(5):
        assert torch.equal(
            first, gate_cumsum(x, layout, GateForm.softplus, A_log=A_log, dt_bias=dt_bias)
        )


def test_a_launch_from_a_thread_with_no_current_context():
    """autograd runs the backward on its own thread, where cake's launch may be the first CUDA work
    (the 64K replay backward failed so with CUDA_ERROR_INVALID_CONTEXT): a launch from a thread
    whose current context was unbound must still run and give the main thread's result."""
    import threading

    from cake.machine import init_driver

    cu = (0, 1000, 1065)
    x = torch.randn(1065, 2, 128, device="cuda")
    layout = layout_for(cu, torch.device("cuda", 0))
    expected = gate_cumsum(x, layout, GateForm.g)  # loads the program on this thread
    out = torch.empty_like(expected)
    module_args = (x, None, None, out, layout.chunks, 2, 0.0)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            from cake.kda.stages import PACKAGE, gate_record
            from cake.loader import default_loader

            module = default_loader().module(PACKAGE, gate_record(GateForm.g, x.dtype), 0)
            driver = init_driver()
            driver.cuCtxSetCurrent(driver.CUcontext(0))
            assert int(driver.cuCtxGetCurrent()[1]) == 0
            module["kda_gate"]((layout.n_chunks, 2), *module_args)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            failures.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not failures, failures
    torch.cuda.synchronize()
    assert torch.equal(out, expected)
