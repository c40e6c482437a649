"""Triton kernels against their torch twins.

Where CUDA is present the kernels run on it in this process. Elsewhere they run under
the Triton CPU interpreter, which must be switched on (``TRITON_INTERPRET=1``) before
anything imports triton, and transformers/peft import it at collection time. So on a
CPU-only machine this module collects a single driver test that re-runs the module in
a fresh interpreter-mode subprocess, and leaves this process's environment alone.
Triton missing is a failure, not a skip: CI installs it (the ``dev`` extra).
"""
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from curriculum.engine.rl import AGGREGATIONS, compute_advantages, policy_loss

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EST = ["grpo", "dr_grpo", "rloo", "reinforce_pp"]
TRITON_MISSING = ("triton is not installed; the Triton kernel tests need it: "
                  "pip install 'triton>=3.7; platform_system == \"Linux\"'")
# The interpreter is usable here only if it was on before triton was first imported.
IN_PROCESS = DEVICE == "cuda" or os.environ.get("_RL_TRITON_WORKER") == "1"


def kernel_test(fn):
    """Collect ``fn`` only where the kernels can run in this process."""
    return fn if IN_PROCESS else None


if not IN_PROCESS:

    def test_triton_kernels_under_interpreter():
        if importlib.util.find_spec("triton") is None:
            pytest.fail(TRITON_MISSING, pytrace=False)
        root = Path(__file__).resolve().parents[2]
        env = dict(os.environ, TRITON_INTERPRET="1", _RL_TRITON_WORKER="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__))],
                              cwd=root, env=env, capture_output=True, text=True, timeout=600)
        report = (proc.stdout + proc.stderr)[-6000:]
        assert proc.returncode == 0, f"interpreter-mode kernel tests failed:\n{report}"
        print(report.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tk():
    if importlib.util.find_spec("triton") is None:
        pytest.fail(TRITON_MISSING, pytrace=False)
    mod = importlib.import_module("curriculum.engine.rl.triton_kernels")
    assert DEVICE == "cuda" or mod.INTERPRETED, "TRITON_INTERPRET=1 must be set before triton is imported"
    return mod


def ragged(seed, n=45, t=21, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(-3, 9, (n,), generator=gen) * 1_000_003  # sparse, negative, shuffled
    ids[0] = 77  # singleton
    ids[1:4] = 55  # zero-variance group
    rewards = torch.randn(n, generator=gen, dtype=dtype) + 10
    rewards[1:4] = 0.25
    rewards[10:20] = torch.randint(0, 2, (10,), generator=gen).to(dtype)  # binary rewards mixed in
    mask = torch.rand(n, t, generator=gen) > 0.3
    mask[7] = False
    perm = torch.randperm(n, generator=gen)
    return rewards[perm].to(DEVICE), ids[perm].to(DEVICE), mask[perm].to(DEVICE)


@kernel_test
@pytest.mark.parametrize("estimator", EST)
def test_advantages_match_torch(tk, estimator):
    rewards, ids, mask = ragged(0)
    for m in (None, mask, mask.float() * 0.5, mask.t().contiguous().t()):  # bool, weights, strided
        want = compute_advantages(rewards, ids, estimator, response_mask=m, backend="torch")
        got = compute_advantages(rewards, ids, estimator, response_mask=m, backend="triton")
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(got).all()


@kernel_test
@pytest.mark.parametrize("estimator", EST)
def test_advantage_kernel_loops_and_splits(tk, estimator):
    """Small blocks so the group scan, the row blocks and the T splits all take several steps."""
    rewards, ids, mask = ragged(1, n=37, t=29, dtype=torch.float64)
    want = compute_advantages(rewards, ids, estimator, response_mask=mask, backend="torch")
    got = tk.group_advantages(rewards, ids, estimator, mask, 1e-6, block_i=8, block_j=16, block_t=8)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


@kernel_test
def test_advantage_edge_cases(tk):
    for est in EST:
        one = compute_advantages(torch.ones(1, device=DEVICE), torch.zeros(1, dtype=torch.long, device=DEVICE),
                                 est, backend="triton")
        assert one.eq(0).all()
        same = compute_advantages(torch.full((6,), 0.1, device=DEVICE), torch.tensor([1, 2, 1, 2, 1, 2], device=DEVICE),
                                  est, response_mask=torch.ones(6, 3, dtype=torch.bool, device=DEVICE), backend="triton")
        assert same.eq(0).all()
    with pytest.raises(ValueError, match="NaN or inf"):
        compute_advantages(torch.tensor([1.0, float("nan")], device=DEVICE), torch.zeros(2, dtype=torch.long,
                                                                                        device=DEVICE), backend="triton")


@kernel_test
def test_auto_picks_torch_for_cpu_tensors(tk):
    from curriculum.engine.rl import _backend

    assert _backend.resolve_backend("auto", torch.zeros(1)) == "torch"
    if DEVICE == "cuda":
        assert _backend.resolve_backend("auto", torch.zeros(1, device="cuda")) == "triton"


def loss_batch(seed, B=6, T=19, per_seq_adv=False):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=gen) * 3
    old = logp + 0.3 * torch.randn(B, T, generator=gen)
    ref = logp + 0.2 * torch.randn(B, T, generator=gen)
    adv = torch.randn(B, generator=gen) if per_seq_adv else torch.randn(B, T, generator=gen)
    mask = torch.rand(B, T, generator=gen) > 0.35
    mask[1] = False
    return [x.to(DEVICE) for x in (logp, old, adv, mask, ref)]


@kernel_test
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("per_seq_adv,with_ref", [(False, True), (True, False)])
def test_fused_loss_forward_backward_match_torch(tk, aggregation, per_seq_adv, with_ref):
    logp, old, adv, mask, ref = loss_batch(2, per_seq_adv=per_seq_adv)
    kw = dict(clip_low=0.2, clip_high=0.28, kl_coef=0.05 if with_ref else 0.0, ref_logp=ref if with_ref else None,
              aggregation=aggregation, norm_len=24)
    assert_backends_agree(logp, old, adv, mask, **kw)


def assert_backends_agree(logp, old, adv, mask, **kw):
    """Loss, statistics and gradient of the torch twin and the fused kernels."""
    results = {}
    for backend in ("torch", "triton"):
        lp = logp.clone().requires_grad_()
        loss, stats = policy_loss(lp, old, adv, mask, backend=backend, **kw)
        (g,) = torch.autograd.grad(loss * 3.0, lp)  # a non-unit upstream gradient
        results[backend] = (loss, stats, g)
    (l1, s1, g1), (l2, s2, g2) = results["torch"], results["triton"]
    torch.testing.assert_close(l2, l1, atol=1e-6, rtol=1e-5)
    assert s1.keys() == s2.keys()
    for k in s1:
        assert s2[k] == pytest.approx(s1[k], rel=1e-5, abs=1e-6), k
    torch.testing.assert_close(g2, g1, atol=1e-7, rtol=1e-5)
    assert g2[1].eq(0).all()


@kernel_test
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("clip_ratio_c,delta", [(3.0, 0.0), (0.0, 2.0), (2.0, 4.0)])
def test_fused_dual_clip_and_delta_match_torch(tk, aggregation, clip_ratio_c, delta):
    logp, old, adv, mask, ref = loss_batch(5)
    old = logp - 1.5 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    ratio = (logp - old).exp()[mask]
    assert (ratio > 4.0).sum() > 5  # both bounds are crossed, on tokens of either sign of A
    assert_backends_agree(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_ratio_c=clip_ratio_c,
                          delta=delta, kl_coef=0.05, ref_logp=ref, aggregation=aggregation, norm_len=24)


@kernel_test
def test_fused_loss_strided_float_mask_and_garbage(tk):
    logp, old, adv, mask, ref = loss_batch(3, B=5, T=24)
    w = mask.float() * torch.rand(mask.shape, device=DEVICE)
    bad = ~mask
    logp_t = logp.masked_fill(bad, float("-inf")).t().contiguous().t()  # column-major strides
    out = {}
    for backend in ("torch", "triton"):
        lp = logp_t.clone().requires_grad_()
        loss, stats = policy_loss(lp, old.masked_fill(bad, float("inf")), adv, w, clip_low=0.1, clip_high=0.3,
                                  kl_coef=0.1, ref_logp=ref, aggregation="seq-mean-token-mean", backend=backend)
        (g,) = torch.autograd.grad(loss, lp)
        out[backend] = (loss, stats, g)
    torch.testing.assert_close(out["triton"][0], out["torch"][0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out["triton"][2], out["torch"][2], atol=1e-7, rtol=1e-5)
    assert torch.isfinite(out["triton"][2]).all() and out["triton"][2][bad].eq(0).all()


@kernel_test
def test_fused_loss_empty_mask(tk):
    logp, old, adv, mask, ref = loss_batch(4)
    lp = logp.clone().requires_grad_()
    loss, stats = policy_loss(lp, old, adv, torch.zeros_like(mask), clip_low=0.2, clip_high=0.2, backend="triton")
    assert loss.item() == 0.0 and stats["ratio_mean"] == 0.0
    (g,) = torch.autograd.grad(loss, lp)
    assert g.eq(0).all()


@kernel_test
def test_zero_length_sequences(tk):
    r, ids = torch.tensor([1.0, 0.0, 2.0], device=DEVICE), torch.tensor([0, 0, 1], device=DEVICE)
    for est in EST:
        out = compute_advantages(r, ids, est, response_mask=torch.ones(3, 0, device=DEVICE), backend="triton")
        assert out.shape == (3, 0)
    loss, _ = policy_loss(torch.zeros(2, 0, device=DEVICE), torch.zeros(2, 0, device=DEVICE),
                          torch.zeros(2, device=DEVICE), torch.zeros(2, 0, device=DEVICE), backend="triton")
    assert loss.item() == 0.0


@kernel_test
def test_fused_kl_clamps_match_torch(tk):
    logp, old, adv, mask, ref = loss_batch(6)
    ref = ref.clone()
    ref[0, :6] = logp[0, :6] + torch.tensor([88.0, 29.0, 21.0, 3.0, -25.0, 2.5], device=DEVICE)
    assert_backends_agree(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, kl_coef=0.05, ref_logp=ref,
                          aggregation="token-mean")
