#!/usr/bin/env bash
# One prepared run on a lent GPU (written for an H200): no installs, about 3-5 minutes.
#   1. correctness of every Triton kernel against its torch twin on CUDA (pytest, in-process);
#   2. triton.testing.do_bench timings and achieved GB/s against a measured device copy
#      (H200 HBM3e: ~4.8 TB/s peak, ~4.3 TB/s reachable by a copy);
#   3. the advantage and log-prob benchmarks on CUDA;
#   4. one self-play round of a random-init Qwen2-0.5B-architecture model (scripts/gpu_check_selfplay.py):
#      rollout and training tokens/s, model FLOPs utilisation (selfplay*.json);
#      the same round with rollouts on vLLM when it imports (VLLM_PYTHON), HF vs vLLM side by side;
#   5. one round of configs/math_single_gpu.yaml (chat prompts, majority labels, LoRA) on a random-init
#      Qwen2-0.5B-architecture model through the CLI (scripts/gpu_check_math.py; math/math.json).
# Results go to $OUT (default ./gpu_check_out): gpu_check.txt (everything), bench.json.
# Usage: OUT=/some/dir PYTHON=python3 bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.txt"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
status=0
step() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

{
step "environment"
date -u
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 | head -3
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name())" || status=1

step "correctness: Triton kernels vs torch twins (CUDA)"
timeout 240 "$PY" -m pytest -q -p no:cacheprovider tests/curriculum/test_rl_triton.py tests/curriculum/test_rl_advantages.py tests/curriculum/test_rl_loss.py 2>&1 | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "do_bench: kernels vs torch twins, GB/s vs copy"
timeout 240 "$PY" - "$OUT/bench.json" <<'PYEOF' || status=1
# (this heredoc is the whole do_bench check; GPU_CHECK_SMOKE=1 TRITON_INTERPRET=1 runs it tiny on a CPU)
import json, sys
import torch, triton
from triton.testing import do_bench
from curriculum.engine.rl import compute_advantages, policy_loss

import os, time
SMOKE = os.environ.get("GPU_CHECK_SMOKE") == "1"  # CPU dry run of this script's logic (TRITON_INTERPRET=1)
dev = "cpu" if SMOKE else "cuda"
S = (lambda n: max(8, n // 256)) if SMOKE else (lambda n: n)  # sizes shrink in a smoke run
res = {"device": "cpu-smoke" if SMOKE else torch.cuda.get_device_name(), "torch": torch.__version__,
       "triton": triton.__version__}

def ms(fn):
    if not SMOKE:
        return do_bench(fn, warmup=25, rep=200, return_mode="median")
    t0 = time.perf_counter(); fn(); return (time.perf_counter() - t0) * 1e3

def copy_gbps(nbytes):
    src = torch.empty(nbytes // 4, device=dev); dst = torch.empty_like(src)
    t = ms(lambda: dst.copy_(src)); return 2 * nbytes / t / 1e6  # read + write, GB/s

ceiling = copy_gbps(S(1 << 30))
res["copy_GBps_1GiB"] = ceiling
print(f"device copy (1 GiB): {ceiling:,.0f} GB/s")

def check(a, b, what, atol=1e-5, rtol=1e-5):
    torch.testing.assert_close(a, b, atol=atol, rtol=rtol, msg=what)

# --- advantages: rewards + ids + bool mask -> fp32 [N, T]
print(f"\n{'advantages':<28}{'N':>7}{'T':>6}{'triton ms':>11}{'torch ms':>10}{'TRL ms':>9}{'GB/s':>8}{'of copy':>9}")
for est in ("grpo", "rloo", "reinforce_pp"):
    for n, t in ((S(4096), S(4096)), (S(16384), S(4096)), (S(1024), S(32768))):
        g = torch.Generator(device=dev).manual_seed(0)
        ids = torch.randperm(n, device=dev, generator=g) // 8  # shuffled groups of 8
        r = torch.randint(0, 2, (n,), device=dev, generator=g).float()
        lens = torch.randint(t // 8, t + 1, (n,), device=dev, generator=g)
        mask = torch.arange(t, device=dev)[None] < lens[:, None]
        a_tri = compute_advantages(r, ids, est, response_mask=mask, backend="triton")
        a_tor = compute_advantages(r, ids, est, response_mask=mask, backend="torch")
        check(a_tri, a_tor, f"advantages {est} {n}x{t}")
        t_tri = ms(lambda: compute_advantages(r, ids, est, response_mask=mask, backend="triton"))
        t_tor = ms(lambda: compute_advantages(r, ids, est, response_mask=mask, backend="torch"))
        rs, ms_ = r.view(-1, 8) if n % 8 == 0 else r.view(1, -1), mask
        t_trl = ms(lambda: ((r - rs.mean(1).repeat_interleave(8)) / (rs.std(1).repeat_interleave(8) + 1e-6))[:, None] * ms_)
        gbps = n * t * (1 + 4) / t_tri / 1e6  # bool mask read + fp32 write
        res[f"adv_{est}_{n}x{t}"] = dict(triton_ms=t_tri, torch_ms=t_tor, trl_ms=t_trl, GBps=gbps)
        print(f"{est:<28}{n:>7}{t:>6}{t_tri:>11.3f}{t_tor:>10.3f}{t_trl:>9.3f}{gbps:>8.0f}{gbps / ceiling:>9.1%}")
    # sequence-level only (no mask): the group-statistics kernel alone
    r16 = torch.rand(S(16384), device=dev); ids16 = torch.randperm(S(16384), device=dev) // 8
    check(compute_advantages(r16, ids16, est, backend="triton"), compute_advantages(r16, ids16, est, backend="torch"), est)
    t1 = ms(lambda: compute_advantages(r16, ids16, est, backend="triton"))
    t2 = ms(lambda: compute_advantages(r16, ids16, est, backend="torch"))
    res[f"adv_{est}_seq16384"] = dict(triton_ms=t1, torch_ms=t2)
    print(f"{est + ' [N] only':<28}{S(16384):>7}{'-':>6}{t1:>11.3f}{t2:>10.3f}")

# --- policy loss: forward + backward
print(f"\n{'policy loss fwd+bwd':<28}{'B':>7}{'T':>6}{'triton ms':>11}{'torch ms':>10}{'fwd GB/s':>10}{'f+b GB/s':>10}{'of copy':>9}")
for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
    for b, t in ((S(1024), S(4096)), (S(4096), S(4096))):
        g = torch.Generator(device=dev).manual_seed(1)
        logp = -torch.rand(b, t, device=dev, generator=g) * 3
        old = logp + 0.3 * torch.randn(b, t, device=dev, generator=g)
        ref = logp + 0.2 * torch.randn(b, t, device=dev, generator=g)
        adv = torch.randn(b, t, device=dev, generator=g)
        mask = torch.rand(b, t, device=dev, generator=g) > 0.3
        kw = dict(clip_low=0.2, clip_high=0.28, kl_coef=0.01, ref_logp=ref, aggregation=agg)
        outs = {}
        for be in ("torch", "triton"):
            lp = logp.clone().requires_grad_()
            loss, stats = policy_loss(lp, old, adv, mask, backend=be, **kw)
            loss.backward(); outs[be] = (loss.detach(), lp.grad, stats)
        check(outs["triton"][0], outs["torch"][0], f"loss {agg}", atol=1e-5, rtol=1e-4)
        check(outs["triton"][1], outs["torch"][1], f"grad {agg}", atol=1e-9, rtol=1e-4)
        lp = logp.clone().requires_grad_()
        def run(be):
            lp.grad = None
            loss, _ = policy_loss(lp, old, adv, mask, backend=be, **kw); loss.backward()
        def fwd(be):
            with torch.no_grad():
                policy_loss(logp, old, adv, mask, backend=be, **kw)
        t_tri, t_tor = ms(lambda: run("triton")), ms(lambda: run("torch"))
        t_fwd = ms(lambda: fwd("triton"))
        fwd_bytes = b * t * (4 * 4 + 1)  # logp, old, adv, ref fp32 + bool mask
        gb_f, gb_fb = fwd_bytes / t_fwd / 1e6, (2 * fwd_bytes + 4 * b * t) / t_tri / 1e6
        res[f"loss_{agg}_{b}x{t}"] = dict(triton_ms=t_tri, torch_ms=t_tor, fwd_ms=t_fwd, fwd_GBps=gb_f, fb_GBps=gb_fb)
        print(f"{agg:<28}{b:>7}{t:>6}{t_tri:>11.3f}{t_tor:>10.3f}{gb_f:>10.0f}{gb_fb:>10.0f}{gb_fb / ceiling:>9.1%}")
json.dump(res, open(sys.argv[1], "w"), indent=1)
print("\nall Triton results equal their torch twins")
PYEOF

step "bench_advantages on CUDA (verl loop / TRL / ours=auto->triton)"
timeout 150 "$PY" scripts/bench_advantages.py --device cuda --backend auto --sizes 1024,16384 || status=1

step "bench_logprob_memory on CUDA (bf16, CUDA peak allocated)"
timeout 200 "$PY" scripts/bench_logprob_memory.py --device cuda --dtype bfloat16 --tokens 8192 --hidden 1024,4096 || status=1
timeout 100 "$PY" scripts/bench_logprob_memory.py --device cuda --dtype bfloat16 --tokens 8192 --hidden 4096 --mode trainable-head || status=1

# ---------------------------------------------------------------------------------------
# Self-play round (the multi-GPU issue): a random-init model of Qwen2-0.5B's architecture,
# one round of the trainer's phases on this GPU; rollout and training tokens/s and MFU.
# Results: selfplay.json (two full models) and selfplay_lora.json (shared base, LoRA).
# CPU dry run of this part: GPU_CHECK_SMOKE=1 python scripts/gpu_check_selfplay.py --out /tmp/s.json
step "self-play round: random-init Qwen2-0.5B architecture, full models (tokens/s, MFU)"
timeout 300 "$PY" scripts/gpu_check_selfplay.py --out "$OUT/selfplay.json" 2>&1 | tail -6
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "self-play round: random-init Qwen2-0.5B architecture, LoRA on a shared base (tokens/s, MFU)"
timeout 240 "$PY" scripts/gpu_check_selfplay.py --lora --out "$OUT/selfplay_lora.json" 2>&1 | tail -6
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# The same round with every rollout on vLLM (rollout.engine=vllm), beside the hf figures above.
# vLLM pins its own torch: VLLM_PYTHON names an environment that has it (default: $PY).
VPY="${VLLM_PYTHON:-$PY}"
if "$VPY" -c "import vllm" 2>/dev/null; then
  step "self-play round on vLLM rollouts: full models, then LoRA (tokens/s, MFU, greedy match with HF)"
  timeout 300 "$VPY" scripts/gpu_check_selfplay.py --engine vllm --out "$OUT/selfplay_vllm.json" 2>&1 | tail -7
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  timeout 240 "$VPY" scripts/gpu_check_selfplay.py --engine vllm --lora --out "$OUT/selfplay_vllm_lora.json" 2>&1 | tail -7
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  step "self-play round on vLLM rollouts: not run, vllm does not import in $VPY (set VLLM_PYTHON)"
fi
# ---------------------------------------------------------------------------------------

step "math environment: configs/math_single_gpu.yaml, one short round, random-init Qwen2-0.5B architecture"
timeout 240 "$PY" scripts/gpu_check_math.py --out "$OUT/math" 2>&1 | tail -6
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

step "done: status=$status"
exit "$status"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
