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
            ln
            for ln in (INCLUDE / m.group(1)).read_text().splitlines(keepends=True)
            if not re.match(r"^\s*#\s*pragma\s+once\s*$", ln)
        )
        out.append(inline(body, used))
    return "".join(out)


def render(name: str, templates: Path = TEMPLATES, **params) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
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


def build(arch: str, l2norm: bool, templates: Path = TEMPLATES, gate: str = "g", x: str = "fp32"):
    """gate / x: the fused gate form of kda_fwd_chunk (a --base template without it ignores them)."""
    progs = {
        "chunk": (
            render(
                "kda/fwd_chunk.cu.j2",
                templates,
                arch=arch,
                l2n="fused" if l2norm else "off",
                gate=gate,
                x=x,
            ),
            "kda_fwd_chunk",
        ),
        "state": (render("kda/fwd_state.cu.j2", templates, arch=arch), "kda_fwd_state"),
    }
    cubins = {}
    for key, (src, fn) in progs.items():
        t = time.time()
        cubin, log = compile_cubin(src, arch, f"{key}_{arch}")
        rep = report(log)
        print(
            f"[{arch} l2norm={l2norm} gate={gate}/{x}] {fn}: {rep.get(fn, log.strip())} ({time.time() - t:.1f}s)"
        )
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
                self._ok(
                    driver.cuFuncSetAttribute(
                        f,
                        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        smem,
                    )
                )
                self._ok(
                    driver.cuFuncSetAttribute(
                        f,
                        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                        100,
                    )
                )
            occ = self._ok(
                driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, THREADS[names[key]], smem)
            )
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
                val, typ = 0, ctypes.c_void_p
            elif isinstance(a, torch.Tensor):
                val, typ = a.data_ptr(), ctypes.c_void_p
            elif isinstance(a, float):
                val, typ = a, ctypes.c_float
            else:
                val, typ = int(a), ctypes.c_int
            vals.append(val)
            types.append(typ)
        stream = self.driver.CUstream(torch.cuda.current_stream().cuda_stream)
        self._ok(
            self.driver.cuLaunchKernel(
                f, *grid, threads, 1, 1, smem, stream, (tuple(vals), tuple(types)), 0
            )
        )


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
    pos = torch.tensor(
        [ci * 64 + r for ci, (s, L) in enumerate(chunks) for r in range(L)], device=g.device
    )
    pad = torch.zeros(NC * 64, H, K, dtype=torch.float32, device=g.device)
    pad[pos] = g[idx].float()
    cs = pad.view(NC, 64, H, K).cumsum(1).view(NC * 64, H, K)
    G = torch.empty_like(g, dtype=torch.float32)
    G[idx] = cs[pos]
    return G


def chunk_args(
    q,
    k,
    v,
    beta,
    xg,
    w,
    H,
    scale,
    A_log=None,
    dt_bias=None,
    G_out=None,
    lower_bound=0.0,
    beta_sigmoid=0,
):
    """kda_fwd_chunk's arguments (the fused-gate signature of packages.toml)."""
    return [
        q,
        k,
        v,
        beta,
        xg,
        A_log,
        dt_bias,
        w["ch"],
        w["Aqk"],
        w["W"],
        w["U"],
        w["Qg"],
        w["Kd"],
        w["gl"],
        G_out,
        None,  # T_out
        None,  # Akk_out
        H,
        beta_sigmoid,
        float(scale),
        float(lower_bound),
    ]


def chunk_args_old(q, k, v, beta, G, w, H, scale):
    """The pre-fusion kda_fwd_chunk signature (G precomputed by kda_gate), for --base templates."""
    return [
        q,
        k,
        v,
        beta,
        G,
        w["ch"],
        w["Aqk"],
        w["W"],
        w["U"],
        w["Qg"],
        w["Kd"],
        w["gl"],
        H,
        0,
        float(scale),
    ]


def forward(
    kern, q, k, v, beta, xg, lengths, h0, scale, beta_sigmoid=0, states=False, ws=None, gate_kw=None
):
    """xg: the log gate g (gate "g") or the raw gate input (gate_kw: A_log, dt_bias, lower_bound)."""
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
            ch=ch,
            sc=sc,
        )
    w = ws
    kern.launch(
        "chunk",
        (NC, H, 1),
        chunk_args(q, k, v, beta, xg, w, H, scale, beta_sigmoid=beta_sigmoid, **(gate_kw or {})),
    )
    kern.launch(
        "state",
        (128 // BV, H, N),
        [
            w["W"],
            w["U"],
            w["Qg"],
            w["Kd"],
            w["Aqk"],
            w["gl"],
            w["ch"],
            w["sc"],
            h0,
            w["o"],
            w["ht"],
            w["st"],
            H,
            int(h0 is not None),
            1,
        ],
    )
    return ws


def reference(q, k, v, g, beta, lengths, h0, scale):
    """float64, token by token: decay, error, update, output (docs/kda.md)."""
    import torch

    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    T, H, K = q.shape
    o = torch.zeros(T, H, K, dtype=torch.float64, device=q.device)
    hts, start = [], 0
    for n, Ln in enumerate(lengths):
        S = (
            h0[n].double().clone()
            if h0 is not None
            else torch.zeros(H, K, K, dtype=torch.float64, device=q.device)
        )
        eg = torch.exp(g[start : start + Ln])
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

    qd, kd, vd, bd = (x[s : s + L].double() for x in (q, k, v, beta))
    Gm = g[s : s + L].double().cumsum(0)  # [L,H,K]
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
        g = torch.where(
            u < 0.5, torch.full_like(u, -1000.0), torch.nn.functional.logsigmoid(rn(T, H, 128)) / 16
        )
    else:
        raise ValueError(regime)
    beta = torch.rand(T, H, generator=gen, device=dev).bfloat16().float()
    h0 = rn(len(lengths), H, 128, 128) * 0.1
    return q, k, v, g.float(), beta, h0


def raw_gate_inputs(T, H, x_dtype, seed, dev):
    import torch

    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    xr = torch.randn(T, H, 128, generator=gen, device=dev).to(x_dtype)
    A_log = torch.log(torch.rand(H, generator=gen, device=dev) * 15 + 1) - 2
    dt_bias = torch.randn(H * 128, generator=gen, device=dev) * 0.5
    return xr, A_log, dt_bias


def raw_gate_ref(xr, A_log, dt_bias, form, lb):
    """float64 per-token log gate of the raw forms (docs/kda.md)."""
    import torch

    T, H, K = xr.shape
    z = xr.double() + dt_bias.double().view(1, H, K)
    a = A_log.double().exp().view(1, H, 1)
    if form == "softplus":
        return -a * torch.nn.functional.softplus(z)
    return lb * torch.sigmoid(a * z)


def run(args):
    import torch

    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    names = {"chunk": "kda_fwd_chunk", "state": "kda_fwd_state"}
    forms = [
        ("g", "fp32", False),
        ("g", "fp32", True),
        ("softplus", "bf16", False),
        ("softplus", "fp32", False),
        ("sigmoid", "bf16", True),
        ("sigmoid", "fp32", False),
    ]
    kern = {f: Kernels(build(args.arch, f[2], gate=f[0], x=f[1]), names) for f in forms}
    gates = {}
    for form, xd, _ in forms:
        if (form, xd) not in gates:
            cub, _ = compile_cubin(
                render("kda/gate.cu.j2", arch=args.arch, gate=form, x=xd),
                args.arch,
                f"gate_{form}_{xd}",
            )
            gates[(form, xd)] = Kernels({"gate": cub}, {"gate": "kda_gate"})

    lengths = [1, 63, 65, 1000, 4033]
    H = 4
    T = sum(lengths)
    scale = 128**-0.5
    lb = -5.0
    chunks, seq_chunks = layout(lengths)
    NC = len(chunks)
    ch_t = torch.tensor(chunks, dtype=torch.int32, device=dev).reshape(-1, 2)
    rows = []
    cases = [
        ("mixed", forms[0]),
        ("fast", forms[0]),
        ("slow", forms[0]),
        ("m1000", forms[0]),
        ("mixed", forms[1]),
        ("raw", forms[2]),
        ("raw", forms[3]),
        ("raw", forms[4]),
        ("raw", forms[5]),
    ]
    for regime, f in cases:
        form, xd, l2 = f
        q, k, v, g, beta, h0 = make_inputs(
            lengths, H, "mixed" if regime == "raw" else regime, l2, 1234, dev
        )
        if form == "g":
            xg, gkw, g_ref = g, {}, g.double()
            A_log = dt_bias = None
        else:
            xg, A_log, dt_bias = raw_gate_inputs(
                T, H, torch.bfloat16 if xd == "bf16" else torch.float32, 99, dev
            )
            gkw = dict(A_log=A_log, dt_bias=dt_bias, lower_bound=lb)
            g_ref = raw_gate_ref(xg, A_log, dt_bias, form, lb)
        Gout = torch.full((T, H, 128), float("nan"), device=dev)
        ws = forward(
            kern[f],
            q,
            k,
            v,
            beta,
            xg,
            lengths,
            h0,
            scale,
            states=True,
            gate_kw=dict(gkw, G_out=Gout),
        )
        # the gate stage's G for the same input: Gamma must be bitwise equal
        Gg = torch.full_like(Gout, float("nan"))
        gates[(form, xd)].launch("gate", (NC, H, 1), [xg, A_log, dt_bias, Gg, ch_t, H, lb])
        torch.cuda.synchronize()
        qr, kr = q.double(), k.double()
        if l2:
            qr = qr / torch.sqrt((qr * qr).sum(-1, keepdim=True) + 1e-6)
            kr = kr / torch.sqrt((kr * kr).sum(-1, keepdim=True) + 1e-6)
        o_ref, ht_ref = reference(qr, kr, v, g_ref, beta, lengths, h0, scale)
        finite = all(
            torch.isfinite(ws[x]).all().item()
            for x in ("Aqk", "W", "U", "Qg", "Kd", "gl", "o", "ht", "st")
        )
        e_a = e_w = e_u = 0.0
        for ci in [sc[0] for sc in seq_chunks] + [seq_chunks[-1][0] + 7]:
            s, L = chunks[ci]
            A_r, W_r, U_r = chunk_reference(qr, kr, v, g_ref, beta, s, L, scale)
            e_a = max(e_a, rel(ws["Aqk"][ci, :, :L, :L], A_r))
            e_w = max(e_w, rel(ws["W"][ci, :, :L], W_r))
            e_u = max(e_u, rel(ws["U"][ci, :, :L], U_r))
        st_ok = torch.equal(ws["st"][seq_chunks[-1][0]], h0[-1].float())
        r = dict(
            case=f"{regime}:{form}/{xd}{'+l2n' if l2 else ''}",
            o=rel(ws["o"], o_ref),
            ht=rel(ws["ht"], ht_ref),
            Aqk=e_a,
            W=e_w,
            U=e_u,
            finite=finite,
            st0=st_ok,
            o_bf16_floor=rel(o_ref.bfloat16(), o_ref),
            G_eq_gate=torch.equal(Gout, Gg),
        )
        same = True
        for _ in range(3):
            G2 = torch.full_like(Gout, float("nan"))
            ws2 = forward(
                kern[f],
                q,
                k,
                v,
                beta,
                xg,
                lengths,
                h0,
                scale,
                states=True,
                gate_kw=dict(gkw, G_out=G2),
            )
            same &= torch.equal(G2, Gout)
            for x in ("Aqk", "W", "U", "Qg", "Kd", "gl", "o", "ht", "st"):
                same &= torch.equal(
                    ws2[x].view(torch.uint8) if x == "o" else ws2[x],
                    ws[x].view(torch.uint8) if x == "o" else ws[x],
                )
        r["det"] = same
        rows.append(r)
        print(r, flush=True)

    # pack invariance: the 1000-token sequence alone vs packed (g form and softplus bf16)
    pack_ok = True
    for f in (forms[0], forms[2]):
        q, k, v, g, beta, h0 = make_inputs(lengths, H, "mixed", False, 1234, dev)
        gkw = {}
        if f[0] != "g":
            g, A_log, dt_bias = raw_gate_inputs(T, H, torch.bfloat16, 99, dev)
            gkw = dict(A_log=A_log, dt_bias=dt_bias, lower_bound=lb)
        wsp = forward(kern[f], q, k, v, beta, g, lengths, h0, scale, gate_kw=gkw)
        a, b = 129, 1129
        wsa = forward(
            kern[f],
            q[a:b].contiguous(),
            k[a:b].contiguous(),
            v[a:b].contiguous(),
            beta[a:b].contiguous(),
            g[a:b].contiguous(),
            [1000],
            h0[3:4].contiguous(),
            scale,
            gate_kw=gkw,
        )
        torch.cuda.synchronize()
        pack_ok &= torch.equal(
            wsp["o"][a:b].view(torch.int16), wsa["o"].view(torch.int16)
        ) and torch.equal(wsp["ht"][3], wsa["ht"][0])
    print("pack invariance:", pack_ok)

    # timing on 1doc
    T, H = 16384, 64
    q, k, v, g, beta, h0 = make_inputs([T], H, "mixed", False, 7, dev)
    chunks, _ = layout([T])
    NC = len(chunks)
    ws = forward(kern[forms[0]], q, k, v, beta, g, [T], h0, scale)
    w = ws
    xr, A_log, dt_bias = raw_gate_inputs(T, H, torch.bfloat16, 5, dev)
    G = torch.empty((T, H, 128), device=dev)
    Gr = torch.empty_like(G)

    def k_gate(form="g", xd="fp32", xin=g, out=G):
        gates[(form, xd)].launch("gate", (NC, H, 1), [xin, A_log, dt_bias, out, w["ch"], H, lb])

    def k_chunk(f=forms[0], xin=g, gout=None):
        kern[f].launch(
            "chunk",
            (NC, H, 1),
            chunk_args(
                q,
                k,
                v,
                beta,
                xin,
                w,
                H,
                scale,
                A_log=A_log,
                dt_bias=dt_bias,
                G_out=gout,
                lower_bound=lb,
            ),
        )

    st_buf = torch.empty((NC, H, 128, 128), device=dev)

    def k_state(kk=kern[forms[0]], states=None, o=None, ht=None):
        kk.launch(
            "state",
            (128 // BV, H, 1),
            [
                w["W"],
                w["U"],
                w["Qg"],
                w["Kd"],
                w["Aqk"],
                w["gl"],
                w["ch"],
                w["sc"],
                h0,
                w["o"] if o is None else o,
                w["ht"] if ht is None else ht,
                states,
                H,
                1,
                1,
            ],
        )

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
    print("gate G == torch cumsum G:", torch.equal(G, gamma(g, chunks)))
    times = dict(
        gate_g=timeit(k_gate),
        gate_softplus_bf16=timeit(lambda: k_gate("softplus", "bf16", xr, Gr)),
        chunk=timeit(k_chunk),
        chunk_Gout=timeit(lambda: k_chunk(gout=Gr)),
        chunk_l2n=timeit(lambda: k_chunk(forms[1])),
        chunk_softplus_bf16=timeit(lambda: k_chunk(forms[2], xr)),
        state=timeit(k_state),
        state_with_states_out=timeit(lambda: k_state(states=st_buf)),
        total=timeit(lambda: (k_chunk(), k_state())),
    )
    if args.base:
        # the kernels rendered from --base (pre-fusion chunk signature, G from kda_gate), same process
        kb = Kernels(build(args.arch, False, Path(args.base).resolve()), names)
        Gf = torch.empty_like(G)
        k_gate(out=Gf)
        kb.launch("chunk", (NC, H, 1), chunk_args_old(q, k, v, beta, Gf, w, H, scale))
        torch.cuda.synchronize()
        old = {x: w[x].clone() for x in ("Aqk", "W", "U", "Qg", "Kd", "gl")}
        k_chunk()
        torch.cuda.synchronize()
        print(
            "chunk new (fused gate) vs base (gate stage + chunk), bitwise:",
            all(torch.equal(old[x], w[x]) for x in old),
        )
        outs = {}
        for nm, kk in (("new", kern[forms[0]]), ("base", kb)):
            o2 = torch.full_like(w["o"], float("nan"))
            ht2 = torch.full_like(w["ht"], float("nan"))
            k_state(kk, o=o2, ht=ht2)
            torch.cuda.synchronize()
            outs[nm] = (o2.view(torch.int16).clone(), ht2.clone())
        print(
            "state new vs base on the same inputs, bitwise:",
            torch.equal(outs["new"][0], outs["base"][0])
            and torch.equal(outs["new"][1], outs["base"][1]),
        )
        times_b = dict(
            chunk=timeit(
                lambda: kb.launch(
                    "chunk", (NC, H, 1), chunk_args_old(q, k, v, beta, Gf, w, H, scale)
                )
            ),
            state=timeit(lambda: k_state(kb)),
            total=timeit(
                lambda: (
                    k_gate(out=Gf),
                    kb.launch("chunk", (NC, H, 1), chunk_args_old(q, k, v, beta, Gf, w, H, scale)),
                    k_state(kb),
                )
            ),
        )
        print("1doc base ms: " + ", ".join(f"{k_}={v_:.3f}" for k_, v_ in times_b.items()))
    print()
    print(
        "| case | o rel-L2 | ht rel-L2 | bf16 floor | Aqk | W | U | finite | det | st0 | G == gate stage |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['o']:.2e} | {r['ht']:.2e} | {r['o_bf16_floor']:.2e} | {r['Aqk']:.1e} | {r['W']:.1e} "
            f"| {r['U']:.1e} | {r['finite']} | {r['det']} | {r['st0']} | {r['G_eq_gate']} |"
        )
    print(f"pack invariance: {pack_ok}")
    print(
        "1doc (16384 tokens, 64 heads) ms: "
        + ", ".join(f"{k_}={v_:.3f}" for k_, v_ in times.items())
    )


def profile(args):
    """One forward on 4096 tokens x 64 heads, for ncu."""
    import os

    import torch

    dev = torch.device("cuda")
    torch.zeros(1, device=dev)
    kern = Kernels(build(args.arch, False), {"chunk": "kda_fwd_chunk", "state": "kda_fwd_state"})
    lengths = [int(x) for x in os.environ.get("KDA_PROF_LENGTHS", "4096").split(",")]
    H = int(os.environ.get("KDA_PROF_H", "64"))
    q, k, v, g, beta, h0 = make_inputs(lengths, H, "mixed", False, 3, dev)
    forward(kern, q, k, v, beta, g, lengths, h0, 128**-0.5, states=True)
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--base", default=None, help="templates dir of a version to time against")
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
        build(arch, False, gate="softplus", x="bf16")


if __name__ == "__main__":
    sys.exit(main())
