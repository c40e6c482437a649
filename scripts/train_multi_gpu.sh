#!/usr/bin/env bash
# Multi-GPU self-play training through torchrun and DeepSpeed (one node, or several under Slurm).
#
#   bash scripts/train_multi_gpu.sh [CONFIG.yaml] [key=value ...]
#   NGPUS=4 bash scripts/train_multi_gpu.sh configs/multi_gpu_8.yaml model.path=/models/Qwen2.5-7B-Instruct
#   RESUME=runs/multi_gpu_8 bash scripts/train_multi_gpu.sh      # continue a run, on any number of GPUs
#
# Under Slurm run it once per node (srun --ntasks-per-node=1); the node count, this node's
# rank and the rendezvous host come from SLURM_NNODES / SLURM_NODEID / SLURM_JOB_NODELIST.
# Environment: NGPUS (default: GPUs on this node), NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="configs/multi_gpu_8.yaml"
if [ $# -gt 0 ] && [[ "$1" == *.yaml ]]; then CONFIG="$1"; shift; fi
NGPUS="${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
[ "${NGPUS:-0}" -ge 1 ] || NGPUS=1
NNODES="${NNODES:-${SLURM_NNODES:-1}}"
NODE_RANK="${NODE_RANK:-${SLURM_NODEID:-0}}"
if [ -z "${MASTER_ADDR:-}" ] && [ -n "${SLURM_JOB_NODELIST:-}" ]; then
  MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
fi
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
MASTER_PORT="${MASTER_PORT:-29500}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
export TOKENIZERS_PARALLELISM=false
if [ -n "${RESUME:-}" ]; then
  ARGS=(train --resume "$RESUME" distributed.engine=deepspeed "$@")
else
  ARGS=(train "$CONFIG" distributed.engine=deepspeed "$@")
fi
echo "[train_multi_gpu] $NNODES node(s) x $NGPUS GPU(s), node rank $NODE_RANK, rendezvous $MASTER_ADDR:$MASTER_PORT" >&2
exec "${PYTHON:-python}" -m torch.distributed.run \
  --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NGPUS" \
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \
  -m curriculum.cli "${ARGS[@]}"
