"""Input generators for KDA tests and benchmarks (docs/measuring.md, "Accuracy").

- q, k, v ~ N(0, 1) in bf16; q and k are unit-normalised (in fp32, then rounded) unless the
  fused L2 norm is under test, in which case they stay raw so the kernel's norm has work to do.
- beta ~ U(0, 1) in bf16, or logits ~ N(0, 1) when use_beta_sigmoid_in_kernel is tested.
- gate regimes for the g form (fp32 log decays):
    mixed   logsigmoid(N(0,1)) / 16
    fast    U[-5, -0.1]
    slow    U[-1e-3, 0]
    extreme -1000 everywhere (decay underflows to 0; catches exponents of raw cumsums)
- raw gate form: x ~ N(0, 1) (fp32 by default), A_log ~ U(0, 1), dt_bias ~ N(0, 0.25) with
  0.25 the standard deviation (torch.normal's convention), both fp32; lower_bound optional.

Every draw comes from a seeded torch.Generator on the target device, so a (seed, shape, device)
triple always gives the same tensors, and nothing is ever left at zero.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

GATE_REGIMES = ("mixed", "fast", "slow", "extreme")
GATE_FORMS = ("g", "raw")


@dataclass(frozen=True)
class KDAInputs:
    """One set of chunk_kda inputs. Tensors are plain (no grad); see `with_grad`."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor  # log decay (g form) or raw gate input x (raw form)
    beta: torch.Tensor
    cu_seqlens: torch.Tensor | None = None
    initial_state: torch.Tensor | None = None
    A_log: torch.Tensor | None = None
    dt_bias: torch.Tensor | None = None
    scale: float | None = None
    use_qk_l2norm_in_kernel: bool = False
    use_gate_in_kernel: bool = False
    use_beta_sigmoid_in_kernel: bool = False
    lower_bound: float | None = None
    regime: str = "mixed"  # gate regime for the g form, "raw" or "raw-lb" for the raw form
    seed: int = 0

    @property
    def lengths(self) -> list[int]:
        if self.cu_seqlens is None:
            return [self.q.shape[1]] * self.q.shape[0]
        cu = self.cu_seqlens.tolist()
        return [b - a for a, b in zip(cu[:-1], cu[1:], strict=True)]

    def as_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for chunk_kda (FLA 0.6.0 and cake) and kda_reference."""
        kw: dict[str, Any] = dict(
            q=self.q,
            k=self.k,
            v=self.v,
            g=self.g,
            beta=self.beta,
            scale=self.scale,
            initial_state=self.initial_state,
            use_qk_l2norm_in_kernel=self.use_qk_l2norm_in_kernel,
            use_gate_in_kernel=self.use_gate_in_kernel,
            use_beta_sigmoid_in_kernel=self.use_beta_sigmoid_in_kernel,
            lower_bound=self.lower_bound,
            cu_seqlens=self.cu_seqlens,
        )
        if self.use_gate_in_kernel:
            kw["A_log"] = self.A_log
            kw["dt_bias"] = self.dt_bias
        return kw

    def grad_names(self) -> list[str]:
        """Names of the tensors that receive gradients in chunk_kda."""
        names = ["q", "k", "v", "g", "beta"]
        if self.use_gate_in_kernel:
            names += [n for n in ("A_log", "dt_bias") if getattr(self, n) is not None]
        if self.initial_state is not None:
            names.append("initial_state")
        return names

    def with_grad(self) -> KDAInputs:
        """Fresh leaf copies (requires_grad) of every differentiable tensor."""
        return dataclasses.replace(
            self,
            **{
                n: getattr(self, n).detach().clone().requires_grad_(True) for n in self.grad_names()
            },
        )


def kda_config(inp: KDAInputs, *, store_final_state: bool = False, saved: bool = False) -> Any:
    """The cake.kda Config that chunk_kda would build for these inputs (for tests and tools that
    call cake.kda.forward / backward directly)."""
    from cake.kda.forward import Config
    from cake.spec import GateForm, L2Norm

    if inp.use_gate_in_kernel:
        form = GateForm.sigmoid if inp.lower_bound is not None else GateForm.softplus
    else:
        form = GateForm.g
    assert inp.cu_seqlens is not None
    return Config(
        cu_seqlens=tuple(int(x) for x in inp.cu_seqlens.tolist()),
        scale=inp.q.shape[-1] ** -0.5,
        gate=form,
        l2n=L2Norm.fused if inp.use_qk_l2norm_in_kernel else L2Norm.off,
        beta_sigmoid=inp.use_beta_sigmoid_in_kernel,
        lower_bound=float(inp.lower_bound) if inp.lower_bound is not None else 0.0,
        store_final_state=store_final_state,
        saved=saved,
    )


def pack_lengths(lengths: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """Sequence lengths -> cu_seqlens (int64 `[N+1]`, starting at 0)."""
    if len(lengths) == 0 or any(int(n) < 0 for n in lengths):
        raise ValueError(
            f"lengths must be a non-empty list of non-negative ints, got {list(lengths)}"
        )
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + int(n))
    return torch.tensor(cu, dtype=torch.int64, device=device)


def _generator(seed: int, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def _normal(shape, gen, device, std: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * std


def _uniform(shape, gen, device, lo: float, hi: float) -> torch.Tensor:
    return torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * (hi - lo) + lo


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def gate_values(regime: str, shape, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """fp32 log decays of one regime (see the module docstring)."""
    if regime == "mixed":
        return torch.nn.functional.logsigmoid(_normal(shape, gen, device)) / 16
    if regime == "fast":
        return _uniform(shape, gen, device, -5.0, -0.1)
    if regime == "slow":
        return _uniform(shape, gen, device, -1e-3, 0.0)
    if regime == "extreme":
        return torch.full(shape, -1000.0, dtype=torch.float32, device=device)
    raise ValueError(f"unknown gate regime {regime!r}; expected one of {GATE_REGIMES}")


def make_inputs(
    lengths: Sequence[int] | None = None,
    *,
    batch: int = 1,
    seqlen: int | None = None,
    heads: int = 4,
    head_k: int = 128,
    head_v: int = 128,
    gate: str = "g",
    regime: str = "mixed",
    lower_bound: float | None = None,
    l2norm_in_kernel: bool = False,
    beta_sigmoid_in_kernel: bool = False,
    initial_state: bool = False,
    dtype: torch.dtype = torch.bfloat16,
    gate_dtype: torch.dtype = torch.float32,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> KDAInputs:
    """Random chunk_kda inputs.

    Either `lengths` (varlen: B = 1 and cu_seqlens) or `batch` x `seqlen` (plain batch).
    `gate` is "g" (log decays of `regime`) or "raw" (x, A_log, dt_bias; `lower_bound` selects the
    sigmoid form). `initial_state` draws an fp32 N(0,1) state `[N,H,K,V]`.
    """
    device = torch.device(device)
    gen = _generator(seed, device)
    if lengths is not None:
        B, T = 1, sum(int(n) for n in lengths)
        cu_seqlens: torch.Tensor | None = pack_lengths(lengths, device)
        N = len(lengths)
    else:
        if seqlen is None:
            raise ValueError("give either lengths (varlen) or seqlen (plain batch)")
        B, T, cu_seqlens, N = batch, seqlen, None, batch
    H, K, V = heads, head_k, head_v

    q = _normal((B, T, H, K), gen, device)
    k = _normal((B, T, H, K), gen, device)
    if not l2norm_in_kernel:
        q, k = _unit(q), _unit(k)
    v = _normal((B, T, H, V), gen, device)
    if beta_sigmoid_in_kernel:
        beta = _normal((B, T, H), gen, device)
    else:
        beta = _uniform((B, T, H), gen, device, 0.0, 1.0)

    A_log = dt_bias = None
    if gate == "g":
        if lower_bound is not None:
            raise ValueError("lower_bound only applies to the raw gate form")
        g = gate_values(regime, (B, T, H, K), gen, device)
        name = regime
    elif gate == "raw":
        g = _normal((B, T, H, K), gen, device)
        A_log = _uniform((H,), gen, device, 0.0, 1.0)
        dt_bias = _normal((H * K,), gen, device, std=0.25)
        name = "raw" if lower_bound is None else "raw-lb"
    else:
        raise ValueError(f"unknown gate form {gate!r}; expected one of {GATE_FORMS}")

    h0 = _normal((N, H, K, V), gen, device) if initial_state else None
    return KDAInputs(
        q=q.to(dtype),
        k=k.to(dtype),
        v=v.to(dtype),
        g=g.to(gate_dtype),
        beta=beta.to(dtype),
        cu_seqlens=cu_seqlens,
        initial_state=h0,
        A_log=A_log,
        dt_bias=dt_bias,
        use_qk_l2norm_in_kernel=l2norm_in_kernel,
        use_gate_in_kernel=gate == "raw",
        use_beta_sigmoid_in_kernel=beta_sigmoid_in_kernel,
        lower_bound=lower_bound,
        regime=name,
        seed=seed,
    )


# The 000 seed's synthetic input: raw gate input -10 with A_log = dt_bias = 0 and lower bound -5,
# i.e. a constant log decay of -5 * sigmoid(-10) ~ -2.27e-4 per token, and beta logits 0, i.e.
# beta = 0.5 (exact in bf16).
LONG_GATE_X = -10.0
LONG_LOWER_BOUND = -5.0
LONG_LOG_DECAY = LONG_LOWER_BOUND / (1.0 + math.exp(-LONG_GATE_X))


# issue 5's H = 4 case: a different slow log decay per token for each head (the seed's is -2.27e-4)
LONG_HEAD_DECAYS = (-2.27e-4, -5e-5, -1e-3, -1e-5)


def make_long_input(
    seqlen: int = 65536,
    heads: int = 1,
    *,
    head_dim: int = 128,
    gate: str = "g",
    seed: int = 0,
    device: torch.device | str = "cpu",
    decays: tuple[float, ...] | None = None,
) -> KDAInputs:
    """The seed-000 long slow-decay case (one sequence, plain batch B = 1).

    gate="g" passes the constant log decay directly (`decays`: one log decay per token for each
    head instead); gate="raw" passes x = -10 with A_log = 0, dt_bias = 0, lower_bound = -5, which is
    the same decay computed in the kernel.
    """
    device = torch.device(device)
    gen = _generator(seed, device)
    shape = (1, seqlen, heads, head_dim)
    q = _unit(_normal(shape, gen, device)).to(torch.bfloat16)
    k = _unit(_normal(shape, gen, device)).to(torch.bfloat16)
    v = _normal(shape, gen, device).to(torch.bfloat16)
    beta = torch.full(shape[:-1], 0.5, dtype=torch.bfloat16, device=device)
    if decays is not None and (gate != "g" or len(decays) != heads):
        raise ValueError(f"decays: one per head ({heads}) for the g form, got {decays}")
    if gate == "g":
        g = torch.full(shape, LONG_LOG_DECAY, dtype=torch.float32, device=device)
        if decays is not None:
            g = torch.tensor(decays, dtype=torch.float32, device=device).view(1, 1, heads, 1)
            g = g.expand(shape).contiguous()
        return KDAInputs(q=q, k=k, v=v, g=g, beta=beta, regime="long", seed=seed)
    if gate == "raw":
        x = torch.full(shape, LONG_GATE_X, dtype=torch.float32, device=device)
        return KDAInputs(
            q=q,
            k=k,
            v=v,
            g=x,
            beta=beta,
            A_log=torch.zeros(heads, dtype=torch.float32, device=device),
            dt_bias=torch.zeros(heads * head_dim, dtype=torch.float32, device=device),
            use_gate_in_kernel=True,
            lower_bound=LONG_LOWER_BOUND,
            regime="long-raw",
            seed=seed,
        )
    raise ValueError(f"unknown gate form {gate!r}; expected one of {GATE_FORMS}")
