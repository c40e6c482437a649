"""Triton kernels for the RL maths; each has a torch twin that the tests hold it equal to.

Imported lazily (``curriculum.engine.rl._backend.triton_kernels``) because importing it
defines ``@triton.jit`` kernels, and ``TRITON_INTERPRET=1`` must be set before that
for the kernels to run on the CPU interpreter (how CI tests them).

Kernels:
* ``_group_adv_kernel``: rewards + group ids (+ mask) -> per-sequence advantages and
  token advantages in one launch. Each program owns ``BLOCK_I`` sequences and scans
  all N group ids to build its groups' statistics (equality tiles, no sort, no
  atomics, deterministic); cost O(N^2 / BLOCK_I) compares per launch, a few
  microseconds at N = 16k on a GPU, and then writes its rows of [N, T].
* ``_broadcast_kernel``: adv_n [N] x mask [N, T] -> [N, T] (REINFORCE++'s second
  phase, after the batch whitening that needs all N values).
* ``_pg_fwd_kernel`` / ``_pg_bwd_kernel``: the clipped surrogate + k3 KL forward
  (per-row partial sums of loss and statistics) and its hand-written backward,
  which recomputes the ratio instead of saving [B, T] intermediates.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from curriculum.engine.rl.segments import whiten_members  # torch twin of the whitening

try:  # which kind of kernel @triton.jit produced tells whether we interpret
    from triton.runtime.interpreter import InterpretedFunction as _Interpreted
except ImportError:  # pragma: no cover - very old triton
    _Interpreted = ()

_ESTIMATOR_CODE = {"grpo": 0, "dr_grpo": 1, "rloo": 2, "reinforce_pp": 3}


# --------------------------------------------------------------------------- advantages
@triton.jit
def _group_adv_kernel(
    r_ptr, gid_ptr, adv_ptr, cnt_ptr, mask_ptr, out_ptr,
    N, T, stride_mn, stride_mt, stride_on, stride_ot, t_per_prog, eps,
    ESTIMATOR: tl.constexpr, WRITE_TOKENS: tl.constexpr,
    BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_T: tl.constexpr,
):
    pid_i = tl.program_id(0)
    pid_t = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    in_i = offs_i < N
    r_i = tl.load(r_ptr + offs_i, mask=in_i, other=0.0)
    g_i = tl.load(gid_ptr + offs_i, mask=in_i, other=0)
    # Shifted sums d = r_j - r_i over the row's group: the shift is a group member,
    # so the variance keeps its precision however large the rewards' offset.
    cnt = r_i * 0.0
    s1 = r_i * 0.0
    s2 = r_i * 0.0
    dmax = r_i * 0.0
    for j0 in range(0, N, BLOCK_J):
        offs_j = j0 + tl.arange(0, BLOCK_J)
        in_j = offs_j < N
        r_j = tl.load(r_ptr + offs_j, mask=in_j, other=0.0)
        g_j = tl.load(gid_ptr + offs_j, mask=in_j, other=0)
        same = (g_i[:, None] == g_j[None, :]) & in_j[None, :]
        d = tl.where(same, r_j[None, :] - r_i[:, None], 0.0)
        cnt += tl.sum(same.to(r_i.dtype), axis=1)
        s1 += tl.sum(d, axis=1)
        s2 += tl.sum(d * d, axis=1)
        dmax = tl.maximum(dmax, tl.max(tl.abs(d), axis=1))
    n = tl.maximum(cnt, 1.0)
    nm1 = tl.maximum(cnt - 1.0, 1.0)
    centred = -s1 / n  # r_i - mean_g
    if ESTIMATOR == 0:  # grpo: unbiased std
        var = tl.maximum(s2 - s1 * s1 / n, 0.0) / nm1
        adv = centred / (tl.sqrt(var) + eps)
    elif ESTIMATOR == 2:  # rloo: r_i - (sum_g - r_i)/(n-1) = -s1/(n-1)
        adv = -s1 / nm1
    else:  # dr_grpo, and reinforce_pp's centring phase
        adv = centred
    degenerate = (cnt < 2.0) | (dmax == 0.0)  # singleton or all rewards equal
    adv = tl.where(degenerate, 0.0, adv)
    first = (offs_i * 0 + pid_t) == 0  # block-shaped: a scalar & block mask is not portable
    tl.store(adv_ptr + offs_i, adv, mask=in_i & first)
    tl.store(cnt_ptr + offs_i, cnt, mask=in_i & first)
    if WRITE_TOKENS:
        _store_token_advantages(adv, offs_i, in_i, pid_t * t_per_prog, t_per_prog, T, mask_ptr, out_ptr,
                                stride_mn, stride_mt, stride_on, stride_ot, BLOCK_T)


@triton.jit
def _broadcast_kernel(
    adv_ptr, mask_ptr, out_ptr, N, T, stride_mn, stride_mt, stride_on, stride_ot, t_per_prog,
    BLOCK_I: tl.constexpr, BLOCK_T: tl.constexpr,
):
    offs_i = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    in_i = offs_i < N
    adv = tl.load(adv_ptr + offs_i, mask=in_i, other=0.0)
    _store_token_advantages(adv, offs_i, in_i, tl.program_id(1) * t_per_prog, t_per_prog, T, mask_ptr, out_ptr,
                            stride_mn, stride_mt, stride_on, stride_ot, BLOCK_T)


@triton.jit
def _store_token_advantages(
    adv, offs_i, in_i, t_start, t_per_prog, T, mask_ptr, out_ptr, stride_mn, stride_mt, stride_on, stride_ot,
    BLOCK_T: tl.constexpr,
):
    """out[i, t] = adv[i] * mask[i, t] for this program's rows and its span of T."""
    rows = offs_i.to(tl.int64)
    for t0 in range(0, t_per_prog, BLOCK_T):
        offs_t = t_start + t0 + tl.arange(0, BLOCK_T)
        ok = in_i[:, None] & (offs_t[None, :] < T)
        m = tl.load(mask_ptr + rows[:, None] * stride_mn + offs_t[None, :] * stride_mt, mask=ok, other=0)
        val = adv[:, None] * m.to(adv.dtype)
        tl.store(out_ptr + rows[:, None] * stride_on + offs_t[None, :] * stride_ot,
                 val.to(out_ptr.dtype.element_ty), mask=ok)


INTERPRETED = isinstance(_group_adv_kernel, _Interpreted) if _Interpreted else False


def _as_loadable(mask: torch.Tensor) -> torch.Tensor:
    """Bool masks are read as uint8 (same bytes, no copy)."""
    return mask.view(torch.uint8) if mask.dtype == torch.bool else mask


def _t_split(n_row_blocks: int, T: int, block_t: int, target_programs: int = 1024):
    """Split T across programs when there are few row blocks, so the GPU stays busy."""
    n_tblocks = triton.cdiv(T, block_t)
    if n_tblocks == 0:
        return 1, block_t
    splits = max(1, min(n_tblocks, triton.cdiv(target_programs, n_row_blocks)))
    t_per_prog = triton.cdiv(n_tblocks, splits) * block_t
    return triton.cdiv(T, t_per_prog), t_per_prog


def group_advantages(rewards_n, group_ids, estimator, mask_nt=None, eps=1e-6,
                     block_i: int = 16, block_j: int = 128, block_t: int = 256):
    """Triton twin of ``advantages.compute_advantages`` (inputs already checked).

    rewards_n: [N] float32/float64; group_ids: integer [N]; mask_nt: optional [N, T].
    Returns adv_n [N] or adv_nt [N, T] in the dtype of ``rewards_n``.
    """
    rewards_n = rewards_n.contiguous()
    gid_n = group_ids.to(torch.int64).contiguous()
    N = rewards_n.shape[0]
    adv_n = torch.empty_like(rewards_n)
    cnt_n = torch.empty_like(rewards_n)
    n_rb = triton.cdiv(N, block_i)
    fused_tokens = mask_nt is not None and estimator != "reinforce_pp"
    if fused_tokens:
        mask = _as_loadable(mask_nt)
        T = mask.shape[1]
        out = torch.empty(mask.shape, dtype=rewards_n.dtype, device=rewards_n.device)
        splits, t_per_prog = _t_split(n_rb, T, block_t)
        args = (mask, out, N, T, mask.stride(0), mask.stride(1), out.stride(0), out.stride(1), t_per_prog)
    else:
        splits, out = 1, None
        args = (rewards_n, rewards_n, N, 0, 0, 0, 0, 0, 0)  # token pointers unused
    _group_adv_kernel[(n_rb, splits)](
        rewards_n, gid_n, adv_n, cnt_n, *args, eps,
        ESTIMATOR=_ESTIMATOR_CODE[estimator], WRITE_TOKENS=fused_tokens,
        BLOCK_I=block_i, BLOCK_J=block_j, BLOCK_T=block_t,
    )
    if estimator != "reinforce_pp":
        return out if fused_tokens else adv_n
    # REINFORCE++ whitening needs statistics over all N sequences: a second phase.
    adv_n = whiten_members(adv_n, cnt_n, eps)
    if mask_nt is None:
        return adv_n
    return broadcast_tokens(adv_n, mask_nt, block_i=block_i, block_t=block_t)


def broadcast_tokens(adv_n, mask_nt, block_i: int = 16, block_t: int = 256):
    """``adv_n[:, None] * mask_nt`` -> [N, T] in adv_n's dtype, one read and one write."""
    mask = _as_loadable(mask_nt)
    N, T = mask.shape
    adv_n = adv_n.contiguous()
    out = torch.empty(mask.shape, dtype=adv_n.dtype, device=adv_n.device)
    n_rb = triton.cdiv(N, block_i)
    splits, t_per_prog = _t_split(n_rb, T, block_t)
    _broadcast_kernel[(n_rb, splits)](
        adv_n, mask, out, N, T, mask.stride(0), mask.stride(1), out.stride(0), out.stride(1), t_per_prog,
        BLOCK_I=block_i, BLOCK_T=block_t,
    )
    return out


# --------------------------------------------------------------------------- policy loss
N_PARTIALS = 8  # loss_sum, mask_sum, clip_low, clip_high, approx_kl, ratio, kl_ref, (pad)


@triton.jit
def _load_row(ptr, b, s_b, offs, s_t, ok, valid):
    """Row ``b`` at ``offs`` as fp32, 0 outside the mask: garbage (inf) there never reaches the maths."""
    return tl.where(valid, tl.load(ptr + b * s_b + offs * s_t, mask=ok, other=0.0).to(tl.float32), 0.0)


@triton.jit
def _pg_fwd_kernel(
    logp_ptr, old_ptr, adv_ptr, ref_ptr, mask_ptr, part_ptr,
    T, s_lb, s_lt, s_ob, s_ot, s_ab, s_at, s_rb, s_rt, s_mb, s_mt,
    t_per_prog, n_splits, clip_low, clip_high, clip_c, delta, kl_coef,
    HAS_REF: tl.constexpr, BLOCK_T: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    acc_loss = tl.zeros([BLOCK_T], tl.float32)
    acc_m = tl.zeros([BLOCK_T], tl.float32)
    acc_lo = tl.zeros([BLOCK_T], tl.float32)
    acc_hi = tl.zeros([BLOCK_T], tl.float32)
    acc_akl = tl.zeros([BLOCK_T], tl.float32)
    acc_r = tl.zeros([BLOCK_T], tl.float32)
    acc_kl = tl.zeros([BLOCK_T], tl.float32)
    t_start = sp * t_per_prog
    for t0 in range(0, t_per_prog, BLOCK_T):
        offs = t_start + t0 + tl.arange(0, BLOCK_T)
        ok = offs < T
        m = tl.load(mask_ptr + b * s_mb + offs * s_mt, mask=ok, other=0).to(tl.float32)
        valid = m != 0.0
        lp = _load_row(logp_ptr, b, s_lb, offs, s_lt, ok, valid)
        olp = _load_row(old_ptr, b, s_ob, offs, s_ot, ok, valid)
        a = _load_row(adv_ptr, b, s_ab, offs, s_at, ok, valid)
        log_ratio = lp - olp
        ratio = tl.exp(log_ratio)
        clipped = tl.minimum(tl.maximum(ratio, 1.0 - clip_low), 1.0 + clip_high)
        loss = -tl.minimum(tl.minimum(ratio, delta) * a, clipped * a)  # delta: TRL's cap on r (inf = off)
        loss = tl.where(a < 0.0, tl.minimum(loss, -a * clip_c), loss)  # verl's dual-clip (inf = off)
        if HAS_REF:
            rl = _load_row(ref_ptr, b, s_rb, offs, s_rt, ok, valid)
            d = tl.minimum(tl.maximum(rl - lp, -20.0), 20.0)  # clamps as verl's low_var_kl (loss.py)
            kl = tl.minimum(tl.exp(d) - d - 1.0, 10.0)  # k3 (Schulman, 2020) >= 0: the -10 bound never binds
            loss += kl_coef * kl
            acc_kl += m * kl
        acc_loss += m * loss
        acc_m += m
        acc_lo += tl.where(valid & (ratio < 1.0 - clip_low) & (a < 0.0), m, 0.0)
        acc_hi += tl.where(valid & (ratio > 1.0 + clip_high) & (a > 0.0), m, 0.0)
        acc_akl += m * (ratio - 1.0 - log_ratio)
        acc_r += m * ratio
    base = part_ptr + (b * n_splits + sp) * 8
    tl.store(base + 0, tl.sum(acc_loss, axis=0))
    tl.store(base + 1, tl.sum(acc_m, axis=0))
    tl.store(base + 2, tl.sum(acc_lo, axis=0))
    tl.store(base + 3, tl.sum(acc_hi, axis=0))
    tl.store(base + 4, tl.sum(acc_akl, axis=0))
    tl.store(base + 5, tl.sum(acc_r, axis=0))
    tl.store(base + 6, tl.sum(acc_kl, axis=0))


@triton.jit
def _pg_bwd_kernel(
    logp_ptr, old_ptr, adv_ptr, ref_ptr, mask_ptr, scale_ptr, grad_ptr,
    T, s_lb, s_lt, s_ob, s_ot, s_ab, s_at, s_rb, s_rt, s_mb, s_mt, s_gb, s_gt,
    clip_low, clip_high, clip_c, delta, kl_coef,
    HAS_REF: tl.constexpr, BLOCK_T: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    ok = offs < T
    m = tl.load(mask_ptr + b * s_mb + offs * s_mt, mask=ok, other=0).to(tl.float32)
    valid = m != 0.0
    lp = _load_row(logp_ptr, b, s_lb, offs, s_lt, ok, valid)
    olp = _load_row(old_ptr, b, s_ob, offs, s_ot, ok, valid)
    a = _load_row(adv_ptr, b, s_ab, offs, s_at, ok, valid)
    ratio = tl.exp(lp - olp)
    # d/dlogp of -min(rA, clip(r)A): 0 where a constant branch is active (the clip; for A < 0 also
    # the cap delta and the dual-clip bound clip_c), else -A r.
    cut = ((a > 0.0) & (ratio > 1.0 + clip_high)) | \
        ((a < 0.0) & ((ratio < 1.0 - clip_low) | (ratio > delta) | (ratio > clip_c)))
    g = tl.where(cut, 0.0, -a * ratio)
    if HAS_REF:
        rl = _load_row(ref_ptr, b, s_rb, offs, s_rt, ok, valid)
        d = rl - lp
        dc = tl.minimum(tl.maximum(d, -20.0), 20.0)
        live = (d >= -20.0) & (d <= 20.0) & (tl.exp(dc) - dc - 1.0 <= 10.0)  # clamps pass no gradient
        g += tl.where(live, kl_coef * (1.0 - tl.exp(dc)), 0.0)  # d/dlogp of k3
    scale = tl.load(scale_ptr + b)
    g = tl.where(valid, g * m * scale, 0.0)
    tl.store(grad_ptr + b * s_gb + offs * s_gt, g.to(grad_ptr.dtype.element_ty), mask=ok)


def _loss_operands(logp, old_logp, adv, mask, ref_logp):
    """Pointers and (batch, token) strides; [B] advantages get token stride 0."""
    adv_strides = (adv.stride(0), 0) if adv.dim() == 1 else (adv.stride(0), adv.stride(1))
    mask = _as_loadable(mask)
    ref = ref_logp if ref_logp is not None else logp
    strides = (logp.stride(0), logp.stride(1), old_logp.stride(0), old_logp.stride(1), *adv_strides,
               ref.stride(0), ref.stride(1), mask.stride(0), mask.stride(1))
    return (logp, old_logp, adv, ref, mask), strides


def pg_partials(logp, old_logp, adv, mask, ref_logp, clip_low, clip_high, clip_c, delta, kl_coef,
                block_t: int = 1024):
    """Forward kernel: per-row sums [B, 8] of masked loss, mask, and statistics.

    ``clip_c`` (dual-clip) and ``delta`` (cap on the ratio) are ``inf`` when off.
    """
    B, T = logp.shape
    ptrs, strides = _loss_operands(logp, old_logp, adv, mask, ref_logp)
    block_t = min(block_t, max(16, triton.next_power_of_2(T)))
    splits, t_per_prog = _t_split(max(B, 1), T, block_t, target_programs=512)
    part = torch.zeros(B, splits, N_PARTIALS, dtype=torch.float32, device=logp.device)
    if B and T:
        _pg_fwd_kernel[(B, splits)](
            *ptrs, part, T, *strides, t_per_prog, splits, float(clip_low), float(clip_high), float(clip_c),
            float(delta), float(kl_coef), HAS_REF=ref_logp is not None, BLOCK_T=block_t,
        )
    return part.sum(1)


def pg_grad(logp, old_logp, adv, mask, ref_logp, scale_b, clip_low, clip_high, clip_c, delta, kl_coef,
            block_t: int = 1024):
    """Backward kernel: d loss / d logp [B, T] given per-row weights ``scale_b`` [B]."""
    B, T = logp.shape
    ptrs, strides = _loss_operands(logp, old_logp, adv, mask, ref_logp)
    grad = torch.empty_like(logp)
    block_t = min(block_t, max(16, triton.next_power_of_2(T)))
    if B and T:
        _pg_bwd_kernel[(B, triton.cdiv(T, block_t))](
            *ptrs, scale_b.to(torch.float32).contiguous(), grad, T, *strides, grad.stride(0), grad.stride(1),
            float(clip_low), float(clip_high), float(clip_c), float(delta), float(kl_coef),
            HAS_REF=ref_logp is not None, BLOCK_T=block_t,
        )
    return grad
