"""What compute-sanitizer's racecheck and synccheck make of named-barrier hand-offs between two
warpgroups (the pattern kda_fwd_state uses), on a kernel whose answer is known.

Warpgroup 0 writes a shared-memory tile with ordinary stores, warpgroup 1 reads it with ordinary
loads, eight rounds, barrier FULL (id 1) after the writes and EMPTY (id 2) after the reads:

  mode 0  one-way both ways: the writer arrives at FULL, the reader syncs; the reader arrives at
          EMPTY, the writer syncs (correct)
  mode 1  as 0 but the reader arrives at EMPTY before it reads (a real write-after-read race)
  mode 2  bar.sync on both sides of both barriers (correct)
  mode 3  FULL one-way, EMPTY on both sides (correct)

Measured on the H200 (session 11, docs/notes.md): racecheck reports mode 0 and mode 3 (correct) as
well as mode 1, and passes mode 2; synccheck passes mode 0 and reports mode 2 and mode 3 as
"divergent thread(s) in block" (the two sides sync at different instructions). So a hand-off of
data written by ordinary stores and read by ordinary loads has no barrier form that both tools
accept; cake's state programs hand over only data that the reader takes through the async proxy
(wgmma operands) or that cp.async wrote, which both tools pass.

  compute-sanitizer --tool racecheck python3 tools/barrier_probe.py --mode 0
  compute-sanitizer --tool synccheck python3 tools/barrier_probe.py --mode 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

BAR = Path(__file__).resolve().parent.parent / "generators" / "include" / "cake" / "bar.cuh"
KERNEL = r"""
extern "C" __global__ void barrier_probe(float* out, int rounds, int mode) {
    __shared__ float tile[1024];
    const int tid = threadIdx.x, wg = tid >> 7, tw = tid & 127;
    float acc = 0.f;
    for (int i = 0; i < rounds; ++i) {
        if (wg == 0) {
            if (i > 0) cake_bar_sync(2, 256);
            for (int j = tw; j < 1024; j += 128) tile[j] = float(i + j);
            if (mode == 2) cake_bar_sync(1, 256);
            else cake_bar_arrive(1, 256);
        } else {
            cake_bar_sync(1, 256);
            const bool more = i + 1 < rounds;
            if (mode == 1 && more) cake_bar_arrive(2, 256);
            for (int j = tw; j < 1024; j += 128) acc += tile[(j + 64) & 1023];
            if (mode == 0 && more) cake_bar_arrive(2, 256);
            if (mode >= 2 && more) cake_bar_sync(2, 256);
        }
    }
    out[tid] = acc;
}
"""
ROUNDS = 8


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", type=int, choices=(0, 1, 2, 3), required=True)
    args = p.parse_args()

    import torch

    from cake.compile import compile_source
    from cake.launch import ArgBlock, _cu_launch, _current_stream, ensure_context
    from cake.machine import _call, init_driver
    from cake.spec import Arch, ArgType

    source = BAR.read_text().replace("#pragma once", "") + KERNEL
    compiled = compile_source(source, Arch("sm_90a"), "barrier_probe")
    ensure_context(0)
    driver = init_driver()
    module = _call(driver, driver.cuModuleLoadData(compiled.cubin), "cuModuleLoadData")
    fn = _call(driver, driver.cuModuleGetFunction(module, b"barrier_probe"), "cuModuleGetFunction")
    out = torch.zeros(256, device="cuda")
    block = ArgBlock([ArgType.ptr, ArgType.i32, ArgType.i32], "barrier_probe")
    block.set([out, ROUNDS, args.mode])
    err = _cu_launch()(int(fn), 4, 1, 1, 256, 1, 1, 0, _current_stream(0), block.params, None)
    torch.cuda.synchronize()
    # reader thread 128 (tw = 0) sums tile[(j + 64) & 1023] = i + ((j + 64) & 1023) over its j
    want = sum(float(i + ((j + 64) & 1023)) for i in range(ROUNDS) for j in range(0, 1024, 128))
    got = out[128].item()
    print(
        f"mode {args.mode}: launch {err}, reader sum {got} (want {want}){'' if got == want else ' WRONG'}"
    )


if __name__ == "__main__":
    main()
