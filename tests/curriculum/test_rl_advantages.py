"""compute_advantages (torch backend) against float64 loops anyone can check by eye."""
import math

import pytest
import torch

from curriculum.engine.rl import ESTIMATORS, compute_advantages

EST = ["grpo", "dr_grpo", "rloo", "reinforce_pp"]


def reference_advantages(rewards, group_ids, estimator, eps=1e-6):
    """Plain-Python float64 reference: a dict of groups, then loops."""
    r = [float(x) for x in rewards]
    g = [int(x) for x in group_ids]
    groups = {}
    for i, gi in enumerate(g):
        groups.setdefault(gi, []).append(i)
    out = [0.0] * len(r)
    for members in groups.values():
        vals = [r[i] for i in members]
        n = len(vals)
        if n < 2 or max(vals) == min(vals):
            continue  # singleton or zero-variance group: 0
        mean = sum(vals) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))  # unbiased
        for i in members:
            if estimator == "grpo":
                out[i] = (r[i] - mean) / (std + eps)
            elif estimator in ("dr_grpo", "reinforce_pp"):
                out[i] = r[i] - mean
            elif estimator == "rloo":
                out[i] = r[i] - (sum(vals) - r[i]) / (n - 1)
    if estimator == "reinforce_pp":
        members = [i for i in range(len(r)) if len(groups[g[i]]) >= 2]
        if len(members) < 2:
            return [0.0] * len(r)
        mean = sum(out[i] for i in members) / len(members)
        std = math.sqrt(sum((out[i] - mean) ** 2 for i in members) / (len(members) - 1))
        if std <= eps:
            return [0.0] * len(r)
        whitened = [0.0] * len(r)
        for i in members:
            whitened[i] = (out[i] - mean) / (std + eps)
        out = whitened
    return out


def random_batch(seed, n=53, n_groups=11, t=17, binary=False):
    """Shuffled ragged groups with arbitrary (negative, sparse) ids, a singleton, a
    zero-variance group, an all-masked row."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, n_groups, (n,), generator=gen) * 7 - 20
    ids[0] = 10_000  # a singleton
    ids[1:4] = 5_000  # a zero-variance group
    rewards = (torch.randint(0, 2, (n,), generator=gen).double() if binary
               else torch.randn(n, generator=gen, dtype=torch.float64) * 3 + 100)
    rewards[1:4] = 0.5
    perm = torch.randperm(n, generator=gen)
    mask = torch.rand(n, t, generator=gen) > 0.3
    mask[5] = False
    return rewards[perm], ids[perm], mask


def test_registry_has_the_four_estimators():
    assert set(EST) <= set(ESTIMATORS)


@pytest.mark.parametrize("estimator", EST)
@pytest.mark.parametrize("seed,binary", [(0, False), (1, True), (2, False)])
def test_matches_float64_loop(estimator, seed, binary):
    rewards, ids, mask = random_batch(seed, binary=binary)
    want = torch.tensor(reference_advantages(rewards, ids, estimator), dtype=torch.float64)
    got64 = compute_advantages(rewards, ids, estimator)
    assert got64.dtype == torch.float64
    torch.testing.assert_close(got64, want, atol=1e-9, rtol=1e-9)
    got32 = compute_advantages(rewards.float(), ids, estimator)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), want, atol=2e-4, rtol=1e-4)
    tok = compute_advantages(rewards.float(), ids, estimator, response_mask=mask)
    assert tok.shape == mask.shape
    torch.testing.assert_close(tok.double(), want[:, None] * mask, atol=2e-4, rtol=1e-4)
    assert (tok[~mask] == 0).all() and (tok[5] == 0).all()


@pytest.mark.parametrize("estimator", EST)
def test_singletons_and_zero_variance_give_exact_zero(estimator):
    rewards = torch.tensor([0.1, 0.1, 0.1, 3.0, 1.0, 2.0, 7.0])
    ids = torch.tensor([4, 4, 4, 9, 2, 2, 8])
    adv = compute_advantages(rewards, ids, estimator)
    assert torch.isfinite(adv).all()
    assert adv[[0, 1, 2, 3, 6]].eq(0).all()
    assert adv[4] < 0 < adv[5]


@pytest.mark.parametrize("estimator", EST)
def test_all_singletons_and_odd_sizes(estimator):
    assert compute_advantages(torch.randn(5), torch.arange(5), estimator).eq(0).all()
    assert compute_advantages(torch.randn(1), torch.zeros(1, dtype=torch.long), estimator).eq(0).all()
    assert compute_advantages(torch.empty(0), torch.empty(0, dtype=torch.long), estimator).shape == (0,)
    out = compute_advantages(torch.empty(0), torch.empty(0, dtype=torch.long), estimator,
                             response_mask=torch.ones(0, 4, dtype=torch.bool))
    assert out.shape == (0, 4)


def test_group_order_and_id_values_do_not_matter():
    rewards, ids, _ = random_batch(3)
    base = compute_advantages(rewards, ids, "grpo")
    perm = torch.randperm(len(ids))
    torch.testing.assert_close(compute_advantages(rewards[perm], ids[perm] * 13 + 1, "grpo"), base[perm])


def test_nan_and_inf_rewards_are_rejected():
    ids = torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="NaN or inf"):
        compute_advantages(torch.tensor([1.0, float("nan"), 0.0]), ids)
    with pytest.raises(ValueError, match="NaN or inf"):
        compute_advantages(torch.tensor([1.0, float("inf"), 0.0]), ids)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compute_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), "ppo")
    with pytest.raises(ValueError, match="unknown backend"):
        compute_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), backend="cuda")
    with pytest.raises(ValueError, match="must both be"):
        compute_advantages(torch.zeros(2), torch.zeros(3, dtype=torch.long))


def test_auto_backend_is_torch_on_cpu():
    rewards, ids, mask = random_batch(4)
    torch.testing.assert_close(compute_advantages(rewards, ids, "rloo", response_mask=mask, backend="auto"),
                               compute_advantages(rewards, ids, "rloo", response_mask=mask))


def test_float_mask_weights_and_bf16_rewards():
    rewards, ids, mask = random_batch(5)
    w = torch.rand(mask.shape, dtype=torch.float64) * mask
    adv = compute_advantages(rewards, ids, "dr_grpo")
    torch.testing.assert_close(compute_advantages(rewards, ids, "dr_grpo", response_mask=w), adv[:, None] * w)
    out = compute_advantages(rewards.to(torch.bfloat16), ids, "grpo")
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_explicit_triton_on_cpu_tensors_is_a_clear_error():
    # Outside TRITON_INTERPRET=1 the kernels need CUDA tensors (or triton is missing).
    with pytest.raises((ValueError, ImportError), match="triton|CUDA"):
        compute_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), backend="triton")


def test_task_relative_baselines_are_per_task_type():
    """Absolute Zero's TRR++: one baseline per task type (the role's batch apart), against a plain loop."""
    from curriculum.engine.rl import group_ids_for

    kinds = ["deduction", "abduction", "deduction", "induction", "abduction", "deduction", "induction", "abduction"]
    rewards = [1.0, 0.0, 0.0, 0.5, 1.0, 1.0, 0.25, 1.0]
    ids = group_ids_for(kinds, group_size=4, task_relative=True)
    assert ids == [0, 1, 0, 2, 1, 0, 2, 1]
    assert group_ids_for(kinds, group_size=4) == [0, 0, 0, 0, 1, 1, 1, 1]  # the GRPO groups otherwise
    got = compute_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(ids), "grpo")
    want = []
    for i, k in enumerate(kinds):
        mine = [r for r, kk in zip(rewards, kinds) if kk == k]
        mean = sum(mine) / len(mine)
        std = math.sqrt(sum((r - mean) ** 2 for r in mine) / (len(mine) - 1))
        want.append((rewards[i] - mean) / (std + 1e-6))
    # deduction: mean 2/3, std 0.57735; abduction: mean 2/3; induction: mean 0.375, std 0.17678
    assert got.tolist() == pytest.approx(want, abs=1e-9)
    assert got[0].item() == pytest.approx((1 - 2 / 3) / (math.sqrt(1 / 3) + 1e-6), abs=1e-9)
    assert got[3].item() == pytest.approx(0.125 / (math.sqrt(0.03125) + 1e-6), abs=1e-9)
    # untyped batch: one group, the batch's own baseline
    assert group_ids_for([""] * 3, group_size=1, task_relative=True) == [0, 0, 0]
