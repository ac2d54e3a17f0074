"""The host's cost model: microseconds of one torch allocation, one argument fill, one launch, one
autograd round trip, on this machine. The small rows' fwd+bwd are bound by the host (docs/notes.md,
session 44), so a change to the host path is predicted from these numbers before it is timed.

  python tools/host_micro.py            (needs a GPU and the kda_det bundle or cache)
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cake.kda.backward import BWD_REDUCE  # noqa: E402
from cake.kda.stages import PACKAGE  # noqa: E402
from cake.launch import ArgBlock, _cu_launch, _current_stream, _NodeParams  # noqa: E402
from cake.loader import default_loader  # noqa: E402
from cake.spec import ArgType  # noqa: E402


def per_call(fn: Callable[[], Any], n: int = 2000, rounds: int = 5) -> float:
    """Best of `rounds` of the mean time of n calls, in us (the GPU drained between rounds)."""
    for _ in range(n // 10):
        fn()
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    return best


class _Fresh(torch.autograd.Function):
    """A Function whose forward allocates its output and whose backward allocates one gradient per
    input: autograd's own cost with the least work of ours."""

    @staticmethod
    def forward(ctx, *xs):  # noqa: ANN001, ANN205
        ctx.n = len(xs)
        return torch.empty_like(xs[0])

    @staticmethod
    def backward(ctx, do):  # noqa: ANN001, ANN205
        return (do,) * ctx.n


def autograd_rows(device: str) -> list[tuple[str, float]]:
    out = []
    for leaves in (1, 5, 7):
        xs = [torch.zeros(64, device=device, requires_grad=True) for _ in range(leaves)]
        do = torch.zeros(64, device=device)

        def step(xs: list[torch.Tensor] = xs, do: torch.Tensor = do) -> None:
            y = _Fresh.apply(*xs)
            torch.autograd.grad(y, xs, do)

        out.append((f"autograd fwd+grad, {leaves} leaves, {device}", per_call(step, 500)))
        with torch.autograd.set_multithreading_enabled(False):  # the engine on this thread
            us = per_call(step, 500)
        out.append(("  the same, autograd multithreading off", us))
        out.append(
            (
                f"Function.apply alone, {leaves} leaves, {device}",
                per_call(lambda xs=xs: _Fresh.apply(*xs), 500),
            )
        )
    return out


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [
        *[(n, ctypes.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "smem")],
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("num_attrs", ctypes.c_uint),
    ]


def launch_rows(fn: Any, launch_args: tuple[Any, ...], gx: int) -> list[tuple[str, float]]:
    """One small kernel launched by each route the driver offers: cuLaunchKernel through ctypes
    (cake's), cuLaunchKernelEx with its configuration built once, and a CUDA graph of 9 such
    launches (cuGraphLaunch alone, and with every node's arguments set again per launch)."""
    lib = ctypes.CDLL("libcuda.so.1")
    vp = ctypes.c_void_p
    out = []
    fn._block.set(launch_args)
    raw, handle, params = _cu_launch(), fn._fn, fn._block.params
    dims = (gx, 1, 1, fn.meta.threads, 1, 1, fn.meta.smem)
    stream = _current_stream(0)
    out.append(
        (
            "cuLaunchKernel by ctypes, filled",
            per_call(lambda: raw(handle, *dims, stream, params, None), 5000),
        )
    )
    ctx = vp()
    get_ctx = lib.cuCtxGetCurrent
    out.append(("cuCtxGetCurrent by ctypes", per_call(lambda: get_ctx(ctypes.byref(ctx)), 20000)))
    cfg = LaunchConfig(*dims, stream, None, 0)
    ex = lib.cuLaunchKernelEx
    ex.restype = ctypes.c_int
    ex.argtypes = [vp] * 4
    cfg_p, h, pp = ctypes.addressof(cfg), vp(handle), ctypes.cast(params, vp)
    assert ex(cfg_p, h, pp, None) == 0
    out.append(
        ("cuLaunchKernelEx, config built once", per_call(lambda: ex(cfg_p, h, pp, None), 5000))
    )

    graph, exec_ = vp(), vp()
    assert lib.cuGraphCreate(ctypes.byref(graph), 0) == 0
    node_params = _NodeParams(handle, *dims, pp.value, None, None, None)
    nodes: list[Any] = []
    for _ in range(9):
        node = vp()
        deps = (vp * 1)(nodes[-1]) if nodes else None
        rc = lib.cuGraphAddKernelNode_v2(
            ctypes.byref(node), graph, deps, len(nodes[-1:]), ctypes.byref(node_params)
        )
        assert rc == 0, rc
        nodes.append(node)
    assert lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0)) == 0
    glaunch = lib.cuGraphLaunch
    glaunch.argtypes = [vp, vp]
    s = vp(stream)
    out.append(("cuGraphLaunch, 9 nodes", per_call(lambda: glaunch(exec_, s), 2000)))
    setp = lib.cuGraphExecKernelNodeSetParams_v2
    setp.argtypes = [vp, vp, vp]
    np_p = ctypes.addressof(node_params)

    def graph_with_params() -> None:
        for node in nodes:
            fn._block.set(launch_args)
            setp(exec_, node, np_p)
        glaunch(exec_, s)

    out.append(
        ("9 x (ArgBlock.set + SetParams) + cuGraphLaunch", per_call(graph_with_params, 2000))
    )

    def nine_launches() -> None:
        for _ in range(9):
            fn((gx,), *launch_args)

    out.append(("9 cake launches", per_call(nine_launches, 2000)))
    return out


def main() -> None:
    dev = torch.device("cuda", 0)
    rows: list[tuple[str, float]] = []
    rows.append(("python call (empty function)", per_call(lambda: None, 100000)))
    big = torch.empty((16384, 4, 128), dtype=torch.bfloat16, device=dev)
    rows.append(("torch.empty 4 MiB", per_call(lambda: torch.empty(1 << 20, device=dev))))
    rows.append(("torch.empty_like bf16 [16384,4,128]", per_call(lambda: torch.empty_like(big))))
    rows.append(("torch.zeros(4)", per_call(lambda: torch.zeros(4, device=dev))))
    f32 = torch.empty(4, device=dev)
    rows.append(("x.float().contiguous() (a no-op)", per_call(lambda: f32.float().contiguous())))
    rows.append(("x.data_ptr()", per_call(big.data_ptr, 100000)))
    rows.append(("current raw stream", per_call(lambda: _current_stream(0), 100000)))
    flat = torch.empty(1 << 22, device=dev)
    rows.append(
        (
            "as_strided view",
            per_call(lambda: flat.as_strided((64, 4, 64, 64), (16384 * 4, 4096, 64, 1), 128)),
        )
    )
    src, index = flat[:1024].view(8, 128), torch.zeros(2, dtype=torch.int64, device=dev)
    dst = torch.empty(2, 128, device=dev)
    rows.append(
        (
            "index_select(out=)",
            per_call(lambda: torch.index_select(src, 0, index, out=dst)),
        )
    )

    kinds = [ArgType.ptr] * 22 + [ArgType.i32, ArgType.i32, ArgType.f32, ArgType.f32]
    block = ArgBlock(kinds, "bwd_chunk-like")
    ts = [torch.empty(16, device=dev) for _ in range(18)]
    args = (*ts, None, None, 12345, 67890, 4, 3, 0.5, -5.0)
    rows.append(("ArgBlock.set, 26 slots (18 tensors)", per_call(lambda: block.set(args), 20000)))

    module = default_loader().module(PACKAGE, BWD_REDUCE, 0)
    fn = module["kda_bwd_gate_reduce"]
    NC, H = 4, 1
    dA_part, dbias_part = torch.zeros(NC, H, device=dev), torch.zeros(NC, H, 128, device=dev)
    dA, db = torch.empty(H, device=dev), torch.empty(H * 128, device=dev)
    launch_args = (dA_part, dbias_part, dA, db, NC, H)
    rows.append(
        ("cake launch (Function.__call__), 6 args", per_call(lambda: fn((H,), *launch_args), 5000))
    )
    rows += launch_rows(fn, launch_args, H)

    rows += autograd_rows("cpu")
    rows += autograd_rows("cuda")
    width = max(len(name) for name, _ in rows)
    print(f"{'host cost':<{width}}  us/call")
    for name, us in rows:
        print(f"{name:<{width}}  {us:8.2f}")


if __name__ == "__main__":
    main()
