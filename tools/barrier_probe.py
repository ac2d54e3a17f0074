"""What compute-sanitizer's racecheck and synccheck make of named-barrier hand-offs between two
warpgroups (the pattern kda_fwd_state uses), on a kernel whose answer is known.

Warpgroup 0 writes a shared-memory tile with ordinary stores, warpgroup 1 reads it with ordinary
loads, eight rounds, barrier FULL (id 1) after the writes and EMPTY (id 2) after the reads:

  mode 0  one-way both ways: the writer arrives at FULL, the reader syncs; the reader arrives at
          EMPTY, the writer syncs (correct)
  mode 1  as 0 but the reader arrives at EMPTY before it reads (a real write-after-read race)
  mode 2  bar.sync on both sides of both barriers (correct)
  mode 3  FULL one-way, EMPTY on both sides (correct)
  mode 4  FULL and EMPTY as mbarriers (128 arrivals: the writer's release arrive, the reader's
          acquire wait on the phase parity; and the other way for EMPTY) (correct)
  mode 5  as 2 with the non-aligned barrier.sync (correct)
  mode 6  as 0 with the non-aligned barrier.arrive / barrier.sync (correct)

Measured on the H200 (session 11, docs/notes.md): racecheck reports mode 0 and mode 3 (correct) as
well as mode 1, and passes mode 2; synccheck passes mode 0 and reports mode 2 and mode 3 as
"divergent thread(s) in block" (the two sides sync at different instructions). Session 21: mode 4
(mbarriers) and mode 5 (the non-aligned barrier.sync on both sides) pass both tools; mode 6 (the
non-aligned one-way form) fails racecheck as mode 0 does. So data written by ordinary stores and
read by ordinary loads is handed over through mbarriers (cake/mbar.cuh: kda_fwd_state's St, which
warpgroup 1 reads for the chunk-start states); the other hand-offs carry only data that the reader
takes through the async proxy (wgmma operands) or that cp.async wrote, which both tools pass with
named barriers.

  compute-sanitizer --tool racecheck python3 tools/barrier_probe.py --mode 0
  compute-sanitizer --tool synccheck python3 tools/barrier_probe.py --mode 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

BAR = Path(__file__).resolve().parent.parent / "generators" / "include" / "cake" / "bar.cuh"
CP = BAR.with_name("cp_async.cuh")  # cake_smem_addr
KERNEL = r"""
__device__ __forceinline__ void mbar_init(unsigned long long* b, int n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(cake_smem_addr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" :: "r"(cake_smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, int parity) {
    asm volatile(
        "{\n .reg .pred p;\n WAIT_%=:\n"
        " mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT_%=;\n}" :: "r"(cake_smem_addr(b)), "r"(parity) : "memory");
}
__device__ __forceinline__ void nbar_sync(int id, int n) {
    asm volatile("barrier.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void nbar_arrive(int id, int n) {
    asm volatile("barrier.arrive %0, %1;" :: "r"(id), "r"(n) : "memory");
}
extern "C" __global__ void barrier_probe(float* out, int rounds, int mode) {
    __shared__ float tile[1024];
    __shared__ unsigned long long mb[2];  // mode 4: FULL, EMPTY (128 arrivals each)
    const int tid = threadIdx.x, wg = tid >> 7, tw = tid & 127;
    if (tid == 0) { mbar_init(mb, 128); mbar_init(mb + 1, 128); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    float acc = 0.f;
    for (int i = 0; i < rounds; ++i) {
        if (wg == 0) {
            if (i > 0) {
                if (mode == 4) mbar_wait(mb + 1, (i - 1) & 1);
                else if (mode == 5) nbar_sync(2, 256);
                else cake_bar_sync(2, 256);
            }
            for (int j = tw; j < 1024; j += 128) tile[j] = float(i + j);
            if (mode == 2) cake_bar_sync(1, 256);
            else if (mode == 4) mbar_arrive(mb);
            else if (mode == 5) nbar_sync(1, 256);
            else if (mode == 6) nbar_arrive(1, 256);
            else cake_bar_arrive(1, 256);
        } else {
            if (mode == 4) mbar_wait(mb, i & 1);
            else if (mode >= 5) nbar_sync(1, 256);
            else cake_bar_sync(1, 256);
            const bool more = i + 1 < rounds;
            if (mode == 1 && more) cake_bar_arrive(2, 256);
            for (int j = tw; j < 1024; j += 128) acc += tile[(j + 64) & 1023];
            if (mode == 0 && more) cake_bar_arrive(2, 256);
            if ((mode == 2 || mode == 3) && more) cake_bar_sync(2, 256);
            if (mode == 4 && more) mbar_arrive(mb + 1);
            if (mode == 5 && more) nbar_sync(2, 256);
            if (mode == 6 && more) nbar_arrive(2, 256);
        }
    }
    out[tid] = acc;
}
"""
ROUNDS = 8


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", type=int, choices=(0, 1, 2, 3, 4, 5, 6), required=True)
    args = p.parse_args()

    import torch

    from cake.compile import compile_source
    from cake.launch import ArgBlock, _cu_launch, _current_stream, ensure_context
    from cake.machine import _call, init_driver
    from cake.spec import Arch, ArgType

    source = (
        CP.read_text().replace("#pragma once", "")
        + BAR.read_text().replace("#pragma once", "")
        + KERNEL
    )
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
