"""Temporary dev harness for the KDA forward kernels (kda_fwd_chunk, kda_fwd_state).

Renders the templates, compiles them with NVRTC to a cubin and prints the ptxas report; with
--run it also checks them on the GPU against a float64 token-by-token recurrence (docs/kda.md),
checks bitwise determinism, and times the 1doc shape. cake's loader will replace this.

    python tools/dev_fwd_check.py                      # compile sm_90a and sm_100a, print report
    PYTHONPATH=. python3 tools/dev_fwd_check.py --run  # on an H200
"""

from __future__ import annotations

import argparse
import ctypes
import math
import re
import sys
import time
from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "generators" / "templates"
INCLUDE = ROOT / "generators" / "include"
_INC = re.compile(r'^\s*#\s*include\s+"(cake/[^"]+)"\s*$')

SMEM = {"kda_fwd_chunk": 115456, "kda_fwd_state": 180736, "kda_gate": 0}
THREADS = {"kda_fwd_chunk": 256, "kda_fwd_state": 256, "kda_gate": 128}
BV = 64


def inline(text: str, used: set[str]) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        m = _INC.match(line)
        if not m:
            if re.match(r"^\s*#\s*include\b", line):
                raise SystemExit(f"foreign include: {line.strip()}")
            out.append(line)
            continue
        if m.group(1) in used:
            continue
        used.add(m.group(1))
        body = "".join(
            ln for ln in (INCLUDE / m.group(1)).read_text().splitlines(keepends=True)
            if not re.match(r"^\s*#\s*pragma\s+once\s*$", ln)
        )
        out.append(inline(body, used))
    return "".join(out)


def render(name: str, **params) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
    )
    return inline(env.get_template(name).render(**params), set())


def compile_cubin(src: str, arch: str, label: str) -> tuple[bytes, str]:
    from cuda.bindings import nvrtc

    def ok(res):
        err = res[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"nvrtc: {err}")
        return res[1:] if len(res) > 2 else (res[1] if len(res) == 2 else None)

    prog = ok(nvrtc.nvrtcCreateProgram(src.encode(), f"{label}.cu".encode(), 0, [], []))
    opts = [f"-arch={arch}".encode(), b"-std=c++17", b"--ptxas-options=-v", b"-default-device"]
    err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    size = ok(nvrtc.nvrtcGetProgramLogSize(prog))
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    log = buf.decode(errors="replace").rstrip("\x00")
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        print(log)
        raise SystemExit(f"compile failed: {label} {arch}")
    size = ok(nvrtc.nvrtcGetCUBINSize(prog))
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin, log


def report(log: str) -> dict[str, str]:
    out, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
            continue
        if cur and ("registers" in line or "spill" in line):
            out[cur] = (out.get(cur, "") + " " + line.split("info    :")[-1].strip()).strip()
    return out


def build(arch: str, l2norm: bool):
    progs = {
        "chunk": (render("kda/fwd_chunk.cu.j2", arch=arch, l2n="fused" if l2norm else "off"), "kda_fwd_chunk"),
        "state": (render("kda/fwd_state.cu.j2", arch=arch), "kda_fwd_state"),
    }
    cubins = {}
    for key, (src, fn) in progs.items():
        t = time.time()
        cubin, log = compile_cubin(src, arch, f"{key}_{arch}")
        rep = report(log)
        print(f"[{arch} l2norm={l2norm}] {fn}: {rep.get(fn, log.strip())} ({time.time() - t:.1f}s)")
        cubins[key] = cubin
    return cubins


# ------------------------------------------------------------------------------------------------
# GPU part
# ------------------------------------------------------------------------------------------------


class Kernels:
    def __init__(self, cubins: dict[str, bytes], names: dict[str, str]):
        from cuda.bindings import driver

        self.driver = driver
        self.fn = {}
        for key, cubin in cubins.items():
            mod = self._ok(driver.cuModuleLoadData(cubin))
            f = self._ok(driver.cuModuleGetFunction(mod, names[key].encode()))
            smem = SMEM[names[key]]
            if smem > 48 * 1024:
                self._ok(driver.cuFuncSetAttribute(
                    f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
                self._ok(driver.cuFuncSetAttribute(
                    f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100))
            occ = self._ok(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, THREADS[names[key]], smem))
            print(f"{names[key]}: {occ} block(s)/SM at {smem} B smem")
            self.fn[key] = (f, THREADS[names[key]], smem)

    def _ok(self, res):
        err = res[0]
        if err != self.driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"driver: {err}")
        return res[1] if len(res) == 2 else None

    def launch(self, key, grid, args):
        import torch

        f, threads, smem = self.fn[key]
        vals, types = [], []
        for a in args:
            if a is None:
                vals.append(0); types.append(ctypes.c_void_p)
            elif isinstance(a, torch.Tensor):
                vals.append(a.data_ptr()); types.append(ctypes.c_void_p)
            elif isinstance(a, float):
                vals.append(a); types.append(ctypes.c_float)
            else:
                vals.append(int(a)); types.append(ctypes.c_int)
        stream = self.driver.CUstream(torch.cuda.current_stream().cuda_stream)
        self._ok(self.driver.cuLaunchKernel(f, *grid, threads, 1, 1, smem, stream,
                                            (tuple(vals), tuple(types)), 0))


def layout(lengths):
    chunks, seq_chunks, start = [], [], 0
    for n in lengths:
        first = len(chunks)
        for s in range(start, start + n, 64):
            chunks.append((s, min(64, start + n - s)))
        seq_chunks.append((first, len(chunks) - first))
        start += n
    return chunks, seq_chunks


def gamma(g, chunks):
    """Chunk-local inclusive cumsum of g [T,H,K] in fp32 (padded per chunk, so no cancellation)."""
    import torch

    T, H, K = g.shape
    NC = len(chunks)
    idx = torch.tensor([s + r for s, L in chunks for r in range(L)], device=g.device)
    pos = torch.tensor([ci * 64 + r for ci, (s, L) in enumerate(chunks) for r in range(L)], device=g.device)
    pad = torch.zeros(NC * 64, H, K, dtype=torch.float32, device=g.device)
    pad[pos] = g[idx].float()
    cs = pad.view(NC, 64, H, K).cumsum(1).view(NC * 64, H, K)
    G = torch.empty_like(g, dtype=torch.float32)
    G[idx] = cs[pos]
    return G


def forward(kern, q, k, v, beta, G, lengths, h0, scale, beta_sigmoid=0, states=False, ws=None):
    import torch

    T, H, K = q.shape
    chunks, seq_chunks = layout(lengths)
    NC, N = len(chunks), len(lengths)
    dev = q.device
    ch = torch.tensor(chunks, dtype=torch.int32, device=dev).reshape(-1, 2)
    sc = torch.tensor(seq_chunks, dtype=torch.int32, device=dev).reshape(-1, 2)
    nan = float("nan")
    if ws is None:
        ws = dict(
            Aqk=torch.full((NC, H, 64, 64), nan, device=dev),
            W=torch.full((NC, H, 64, 128), nan, device=dev),
            U=torch.full((NC, H, 64, 128), nan, device=dev),
            Qg=torch.full((NC, H, 64, 128), nan, device=dev),
            Kd=torch.full((NC, H, 128, 64), nan, device=dev),
            gl=torch.full((NC, H, 128), nan, device=dev),
            o=torch.full((T, H, 128), nan, dtype=torch.bfloat16, device=dev),
            ht=torch.full((N, H, 128, 128), nan, device=dev),
            st=torch.full((NC, H, 128, 128), nan, device=dev) if states else None,
            ch=ch, sc=sc,
        )
    w = ws
    kern.launch("chunk", (NC, H, 1), [q, k, v, beta, G, w["ch"], w["Aqk"], w["W"], w["U"], w["Qg"],
                                      w["Kd"], w["gl"], H, beta_sigmoid, float(scale)])
    kern.launch("state", (128 // BV, H, N), [w["W"], w["U"], w["Qg"], w["Kd"], w["Aqk"], w["gl"],
                                             w["ch"], w["sc"], h0, w["o"], w["ht"], w["st"], H,
                                             int(h0 is not None), 1])
    return ws


def reference(q, k, v, g, beta, lengths, h0, scale):
    """float64, token by token: decay, error, update, output (docs/kda.md)."""
    import torch

    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    T, H, K = q.shape
    o = torch.zeros(T, H, K, dtype=torch.float64, device=q.device)
    hts, start = [], 0
    for n, Ln in enumerate(lengths):
        S = h0[n].double().clone() if h0 is not None else torch.zeros(H, K, K, dtype=torch.float64, device=q.device)
        eg = torch.exp(g[start:start + Ln])
        for tt in range(start, start + Ln):
            S = S * eg[tt - start].unsqueeze(-1)
            e = v[tt] - torch.einsum("hk,hkv->hv", k[tt], S)
            S = S + beta[tt][:, None, None] * k[tt].unsqueeze(-1) * e.unsqueeze(1)
            o[tt] = torch.einsum("hk,hkv->hv", q[tt] * scale, S)
        hts.append(S)
        start += Ln
    return o, torch.stack(hts)


def chunk_reference(q, k, v, g, beta, s, L, scale):
    """float64 intermediates of one chunk [s, s+L), all heads, pairwise exponents (no overflow)."""
    import torch

    qd, kd, vd, bd = (x[s:s + L].double() for x in (q, k, v, beta))
    Gm = g[s:s + L].double().cumsum(0)  # [L,H,K]
    diff = Gm[:, None] - Gm[None, :]  # [i,j,H,K]
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool, device=q.device))
    D = torch.where(mask[:, :, None, None], diff, torch.full_like(diff, -math.inf)).exp()
    Aqk = scale * torch.einsum("ihd,jhd,ijhd->hij", qd, kd, D)
    M = torch.einsum("ihd,jhd,ijhd->hij", kd, kd, D) * bd.T[:, :, None]
    M = M * torch.tril(torch.ones(L, L, device=q.device, dtype=torch.float64), -1)
    Tm = torch.linalg.inv(torch.eye(L, dtype=torch.float64, device=q.device) + M)
    Wr = Tm @ (bd.T[:, :, None] * (kd * Gm.exp()).transpose(0, 1))
    Ur = Tm @ (bd.T[:, :, None] * vd.transpose(0, 1))
    return Aqk, Wr, Ur


def rel(a, b):
    import torch

    a, b = a.double(), b.double()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-300)).item()


def make_inputs(lengths, H, regime, raw_qk, seed, dev):
    import torch

    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    T = sum(lengths)
    rn = lambda *s: torch.randn(*s, generator=gen, device=dev)  # noqa: E731
    q, k, v = rn(T, H, 128), rn(T, H, 128), rn(T, H, 128)
    if not raw_qk:
        q = q / q.norm(dim=-1, keepdim=True)
        k = k / k.norm(dim=-1, keepdim=True)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    u = torch.rand(T, H, 128, generator=gen, device=dev)
    if regime == "mixed":
        g = torch.nn.functional.logsigmoid(rn(T, H, 128)) / 16
    elif regime == "fast":
        g = -5 + 4.9 * u
    elif regime == "slow":
        g = -1e-3 * u
    elif regime == "m1000":
        # half the dims at -1000 per token, the rest mixed: exponents of raw cumsums overflow
        g = torch.where(u < 0.5, torch.full_like(u, -1000.0), torch.nn.functional.logsigmoid(rn(T, H, 128)) / 16)
    else:
        raise ValueError(regime)
    beta = torch.rand(T, H, generator=gen, device=dev).bfloat16().float()
    h0 = rn(len(lengths), H, 128, 128) * 0.1
    return q, k, v, g.float(), beta, h0


def run(args):
    import torch

    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    names = {"chunk": "kda_fwd_chunk", "state": "kda_fwd_state"}
    kern = {l2: Kernels(build(args.arch, l2), names) for l2 in (False, True)}

    lengths = [1, 63, 65, 1000, 4033]
    H = 4
    scale = 128 ** -0.5
    rows = []
    for regime, l2 in [("mixed", False), ("fast", False), ("slow", False), ("m1000", False), ("mixed", True)]:
        q, k, v, g, beta, h0 = make_inputs(lengths, H, regime, l2, 1234, dev)
        G = gamma(g, layout(lengths)[0])
        ws = forward(kern[l2], q, k, v, beta, G, lengths, h0, scale, states=True)
        torch.cuda.synchronize()
        qr, kr = q.double(), k.double()
        if l2:
            qr = qr / torch.sqrt((qr * qr).sum(-1, keepdim=True) + 1e-6)
            kr = kr / torch.sqrt((kr * kr).sum(-1, keepdim=True) + 1e-6)
        o_ref, ht_ref = reference(qr, kr, v, g, beta, lengths, h0, scale)
        finite = all(torch.isfinite(ws[x]).all().item() for x in ("Aqk", "W", "U", "Qg", "Kd", "gl", "o", "ht", "st"))
        # intermediates for a few chunks (first chunk of each sequence, one mid chunk)
        chunks, seq_chunks = layout(lengths)
        e_a = e_w = e_u = 0.0
        for ci in [sc[0] for sc in seq_chunks] + [seq_chunks[-1][0] + 7]:
            s, L = chunks[ci]
            A_r, W_r, U_r = chunk_reference(qr, kr, v, g, beta, s, L, scale)
            e_a = max(e_a, rel(ws["Aqk"][ci, :, :L, :L], A_r))
            e_w = max(e_w, rel(ws["W"][ci, :, :L], W_r))
            e_u = max(e_u, rel(ws["U"][ci, :, :L], U_r))
        # states_out: chunk starts of the last sequence vs its first chunk = h0
        st_ok = torch.equal(ws["st"][seq_chunks[-1][0]], h0[-1].float())
        r = dict(case=f"{regime}{'+l2n' if l2 else ''}", o=rel(ws["o"], o_ref), ht=rel(ws["ht"], ht_ref),
                 o_1000=rel(ws["o"][65 + 64:1129], o_ref[65 + 64:1129]),
                 Aqk=e_a, W=e_w, U=e_u, finite=finite, st0=st_ok,
                 o_bf16_floor=rel(o_ref.bfloat16(), o_ref))
        # determinism: 3 more calls, bitwise
        same = True
        for _ in range(3):
            ws2 = forward(kern[l2], q, k, v, beta, G, lengths, h0, scale, states=True)
            for x in ("Aqk", "W", "U", "Qg", "Kd", "gl", "o", "ht", "st"):
                same &= torch.equal(ws2[x].view(torch.uint8) if x == "o" else ws2[x], ws[x].view(torch.uint8) if x == "o" else ws[x])
        r["det"] = same
        rows.append(r)
        print(r, flush=True)

    # pack invariance: the 1000-token sequence alone vs packed
    q, k, v, g, beta, h0 = make_inputs(lengths, H, "mixed", False, 1234, dev)
    G = gamma(g, layout(lengths)[0])
    wsp = forward(kern[False], q, k, v, beta, G, lengths, h0, scale)
    a, b = 129, 1129
    wsa = forward(kern[False], q[a:b].contiguous(), k[a:b].contiguous(), v[a:b].contiguous(), beta[a:b].contiguous(),
                  G[a:b].contiguous(), [1000], h0[3:4].contiguous(), scale)
    torch.cuda.synchronize()
    pack_ok = torch.equal(wsp["o"][a:b].view(torch.int16), wsa["o"].view(torch.int16)) and torch.equal(wsp["ht"][3], wsa["ht"][0])
    print("pack invariance:", pack_ok)

    # timing on 1doc
    T, H = 16384, 64
    q, k, v, g, beta, h0 = make_inputs([T], H, "mixed", False, 7, dev)
    chunks, _ = layout([T])
    G = gamma(g, chunks)
    ws = forward(kern[False], q, k, v, beta, G, [T], h0, scale)
    kl2 = kern[True]
    gate_src = render("kda/gate.cu.j2", arch=args.arch, gate="g")
    gcubin, _ = compile_cubin(gate_src, args.arch, "gate")
    kg = Kernels({"gate": gcubin}, {"gate": "kda_gate"})
    Gg = torch.empty_like(G)
    Ab = torch.zeros(H, device=dev)
    Db = torch.zeros(H * 128, device=dev)
    w = ws
    NC = len(chunks)

    def k_gate():
        kg.launch("gate", (NC, H, 1), [g, Ab, Db, Gg, w["ch"], H, 0.0])

    def k_chunk(kk=kern[False]):
        kk.launch("chunk", (NC, H, 1), [q, k, v, beta, G, w["ch"], w["Aqk"], w["W"], w["U"], w["Qg"], w["Kd"], w["gl"], H, 0, float(scale)])

    st_buf = torch.empty((NC, H, 128, 128), device=dev)

    def k_state(states=None):
        kern[False].launch("state", (128 // BV, H, 1), [w["W"], w["U"], w["Qg"], w["Kd"], w["Aqk"], w["gl"], w["ch"], w["sc"], h0, w["o"], w["ht"], states, H, 1, 1])

    def timeit(fn, samples=7, calls=20):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(samples):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(calls):
                fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / calls)
        return sorted(ts)[len(ts) // 2]

    k_gate()
    torch.cuda.synchronize()
    gate_ok = torch.equal(Gg, G)
    times = dict(gate=timeit(k_gate), chunk=timeit(k_chunk), chunk_l2n=timeit(lambda: k_chunk(kl2)),
                 state=timeit(k_state), state_with_states_out=timeit(lambda: k_state(st_buf)),
                 total=timeit(lambda: (k_gate(), k_chunk(), k_state())))
    print("gate G == torch cumsum G:", gate_ok)
    print()
    print(f"| case | o rel-L2 | ht rel-L2 | o(1000-seq) | bf16 floor | Aqk | W | U | finite | det | st0 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['o']:.2e} | {r['ht']:.2e} | {r['o_1000']:.2e} | {r['o_bf16_floor']:.2e} | {r['Aqk']:.1e} | {r['W']:.1e} | {r['U']:.1e} | {r['finite']} | {r['det']} | {r['st0']} |")
    print(f"pack invariance: {pack_ok}")
    print("1doc (16384 tokens, 64 heads) ms: " + ", ".join(f"{k_}={v_:.3f}" for k_, v_ in times.items()))


def profile(args):
    """One forward on 4096 tokens x 64 heads, for ncu."""
    import torch

    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    kern = Kernels(build(args.arch, False), {"chunk": "kda_fwd_chunk", "state": "kda_fwd_state"})
    import os

    lengths = [int(x) for x in os.environ.get("KDA_PROF_LENGTHS", "4096").split(",")]
    H = int(os.environ.get("KDA_PROF_H", "64"))
    q, k, v, g, beta, h0 = make_inputs(lengths, H, "mixed", False, 3, dev)
    G = gamma(g, layout(lengths)[0])
    forward(kern, q, k, v, beta, G, lengths, h0, 128 ** -0.5, states=True)
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.profile:
        profile(args)
        return
    if args.run:
        run(args)
        return
    for arch in ("sm_90a", "sm_100a"):
        for l2 in (False, True):
            build(arch, l2)


if __name__ == "__main__":
    sys.exit(main())
