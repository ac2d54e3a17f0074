"""CPU: the host path of cake.kda.forward with recording stand-ins for the programs: a call's
programs are selected and fetched once per signature, and the launches' buffer addresses are the
saved views' (a stand-in writes through the addresses, the test reads the views)."""

from __future__ import annotations

import ctypes
from itertools import pairwise
from typing import Any

import pytest
import torch
from kda_inputs import kda_config, make_inputs

import cake.kda.forward as forward_module

MARK = 0x3F  # every byte: the float32 0x3F3F3F3F


class _Kernel:
    def __init__(self, symbol: str, calls: list[tuple[str, tuple[Any, ...]]]) -> None:
        self.symbol = symbol
        self.calls = calls

    def __call__(self, grid: tuple[int, ...], *args: Any, stream: int | None = None) -> None:
        self.calls.append((self.symbol, args))
        if self.symbol == "kda_fwd_chunk":  # W (argument 9), through its address
            W, NC, H = args[9], len(args[7]), args[18]  # chunks [NC, 2] is argument 7
            ctypes.memset(W, MARK, NC * H * 64 * 128 * 4)


class _Module(dict):
    def __init__(self, calls: list[tuple[str, tuple[Any, ...]]]) -> None:
        super().__init__()
        self.calls = calls

    def __missing__(self, symbol: str) -> _Kernel:
        return _Kernel(symbol, self.calls)


class _Loader:
    def __init__(self) -> None:
        self.ensured = 0
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def ensure(self, wanted: list[tuple[str, str]], device: int) -> list[Any]:
        self.ensured += 1
        return []

    def module(self, package: str, record: str, device: int) -> _Module:
        return _Module(self.calls)


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> _Loader:
    fake = _Loader()
    monkeypatch.setattr(forward_module, "default_loader", lambda: fake)
    return fake


def run(inp: Any, **kw: Any) -> Any:
    args = (inp.q, inp.k, inp.v, inp.g, inp.beta, inp.A_log, inp.dt_bias, inp.initial_state)
    return forward_module.forward(*args, kda_config(inp, saved=True), keep=True, **kw)[2]


def test_programs_are_looked_up_once_per_signature(loader: _Loader):
    inp = make_inputs([65, 1], heads=2, seed=1)
    run(inp)
    run(inp)
    assert loader.ensured == 1
    run(make_inputs([64, 2], heads=2, seed=1))  # other lengths: another layout and plan
    assert loader.ensured == 2
    run(inp, want_o=False)  # the replay's signature: the program without O
    assert loader.ensured == 3


def test_launch_addresses_are_the_saved_views(loader: _Loader):
    saved = run(make_inputs([65, 1, 130], heads=2, seed=2))
    assert saved is not None
    W = saved["W"]
    assert bool((W.view(torch.int32) == int.from_bytes(bytes([MARK] * 4), "little")).all())
    (chunk_args,) = [a for s, a in loader.calls if s == "kda_fwd_chunk"]
    names = ["Aqk", "W", None, "Qg", "Kd", "gl", "G", "TA", "R"]  # arguments 8..16 (U own)
    for name, arg in zip(names, chunk_args[8:17], strict=True):
        if name is not None:
            want = saved[name]
            assert arg == (want.data_ptr() if want is not None else None), name
    spans = sorted(
        (saved[n].data_ptr(), saved[n].data_ptr() + saved[n].nbytes)
        for n in ("Aqk", "W", "Qg", "Kd", "gl", "G", "TA", "states")
        if saved[n] is not None  # G: raw gates only
    )
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(spans))


@pytest.mark.parametrize(("lengths", "split"), [([65, 1], False), ([64 * 40, 65], True)])
def test_the_backward_takes_the_bulk_state_kernel_for_split_calls_only(
    loader: _Loader, lengths: list[int], split: bool
):
    import cake.kda.backward as backward_module

    inp = make_inputs(lengths, heads=2, seed=3)
    st = backward_module._static(
        loader, kda_config(inp, saved=True), 2, inp.g.dtype, inp.q.device, False
    )
    assert st.plan.any_split is split
    assert st.state.symbol == ("kda_bwd_state_bulk" if split else "kda_bwd_state")


@pytest.mark.parametrize("has_lean", [True, False])
def test_the_local_launch_takes_the_lean_kernel_where_the_program_has_it(
    loader: _Loader, monkeypatch: pytest.MonkeyPatch, has_lean: bool
):
    # sm_90a's local program has kda_fwd_state_lean (packages.toml); the others only kda_fwd_state
    monkeypatch.setattr(
        _Module, "__contains__", lambda self, s: has_lean or s != "kda_fwd_state_lean"
    )
    inp = make_inputs([64 * 40, 65], heads=2, seed=3)
    T = inp.q.shape[0] * inp.q.shape[1]
    forward_module._static.cache_clear()  # the kernels are looked up once per signature
    st = forward_module._static(
        loader, kda_config(inp, saved=True), 2, T, inp.g.dtype, inp.q.device, True, True
    )
    forward_module._static.cache_clear()
    assert st.plan.any_split
    assert st.local.symbol == ("kda_fwd_state_lean" if has_lean else "kda_fwd_state")
    assert st.state.symbol == "kda_fwd_state"  # the fix-up: every program's kernel
