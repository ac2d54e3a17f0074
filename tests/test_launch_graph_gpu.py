"""GPU: cake.launch.Batch, a call's launches issued as one CUDA graph. The graph must compute what
the same kernels launched one by one compute, take each issue's own arguments, run from a thread
with no current context, and step aside (one launch at a time) inside the caller's graph capture."""

from __future__ import annotations

import threading

import pytest
import torch

import cake.launch as launch
from cake.kda.layout import layout_for
from cake.kda.stages import PACKAGE, gate_cumsum, gate_record
from cake.loader import default_loader
from cake.spec import GateForm

pytestmark = [pytest.mark.gpu]

CU = (0, 1000, 1065)
H = 2


def _gate_kernel() -> launch.Function:
    return default_loader().module(PACKAGE, gate_record(GateForm.g, torch.float32), 0)["kda_gate"]


def _inputs(seed: int, n: int = 3, cu: tuple[int, ...] = CU) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(cu[-1], H, 128, device="cuda", generator=gen) for _ in range(n)]


def _record(
    batch: launch.Batch, xs: list[torch.Tensor], outs: list[torch.Tensor], cu: tuple[int, ...] = CU
) -> None:
    fn = _gate_kernel()
    layout = layout_for(cu, torch.device("cuda", 0))
    for x, out in zip(xs, outs, strict=True):
        batch(fn, (layout.n_chunks, H), x, None, None, out, layout.chunks, H, 0.0)


def _expected(xs: list[torch.Tensor], cu: tuple[int, ...] = CU) -> list[torch.Tensor]:
    layout = layout_for(cu, torch.device("cuda", 0))
    return [gate_cumsum(x, layout, GateForm.g) for x in xs]  # one launch each


def test_a_batch_runs_as_one_graph_and_takes_each_issues_grids_and_arguments():
    graphs = []
    # other tensors, then other lengths (another grid): the same graph, its nodes set again
    for seed, cu in ((1, CU), (2, CU), (3, (0, 70, 3000, 3001))):
        xs = _inputs(seed, cu=cu)
        outs = [torch.full_like(x, float("nan")) for x in xs]
        batch = launch.Batch()
        _record(batch, xs, outs, cu)
        key = tuple(fn for fn, _, _ in batch.steps)
        batch.issue()
        assert batch.steps == []
        graphs.append(launch._GRAPH_CACHE[key])  # issued as a graph, not one by one
        torch.cuda.synchronize()
        want = _expected(xs, cu)
        for out, w in zip(outs, want, strict=True):
            assert torch.equal(out, w)
        # the same arguments again: the nodes are not set again, the graph runs again
        for out in outs:
            out.fill_(float("nan"))
        _record(batch, xs, outs, cu)
        batch.issue()
        torch.cuda.synchronize()
        for out, w in zip(outs, want, strict=True):
            assert torch.equal(out, w)
    assert graphs[0] is graphs[1] is graphs[2]


def test_a_batch_issued_from_a_thread_with_no_current_context():
    from cake.machine import init_driver

    xs = _inputs(3)
    outs = [torch.full_like(x, float("nan")) for x in xs]
    want = _expected(xs)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            driver = init_driver()
            driver.cuCtxSetCurrent(driver.CUcontext(0))
            batch = launch.Batch()
            _record(batch, xs, outs)
            batch.issue(stream=torch.cuda.current_stream().cuda_stream)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            failures.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not failures, failures
    torch.cuda.synchronize()
    for out, w in zip(outs, want, strict=True):
        assert torch.equal(out, w)


def test_a_batch_inside_a_torch_graph_capture_launches_one_by_one():
    xs = _inputs(4)
    outs = [torch.full_like(x, float("nan")) for x in xs]
    _gate_kernel()  # loaded before the capture
    layout_for(CU, torch.device("cuda", 0))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        batch = launch.Batch()
        _record(batch, xs, outs)
        batch.issue()
    new = _inputs(5)
    for x, n in zip(xs, new, strict=True):
        x.copy_(n)
    graph.replay()
    torch.cuda.synchronize()
    for out, want in zip(outs, _expected(new), strict=True):
        assert torch.equal(out, want)
