#!/usr/bin/env bash
# The same run through the `deepspeed` launcher (it sets RANK / WORLD_SIZE / LOCAL_RANK like torchrun).
#
#   bash scripts/launch_deepspeed.sh [CONFIG.yaml] [key=value ...]
#   NGPUS=8 bash scripts/launch_deepspeed.sh configs/multi_gpu_8.yaml model.path=/models/Qwen2.5-7B-Instruct
#   HOSTFILE=hostfile bash scripts/launch_deepspeed.sh ...     # several nodes ("node1 slots=8" per line; pdsh/ssh)
#
# --no_local_rank: the trainer reads LOCAL_RANK from the environment, not from a --local_rank argument.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="configs/multi_gpu_8.yaml"
if [ $# -gt 0 ] && [[ "$1" == *.yaml ]]; then CONFIG="$1"; shift; fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
export TOKENIZERS_PARALLELISM=false
LAUNCH=(deepspeed --no_local_rank --master_port "${MASTER_PORT:-29500}")
if [ -n "${HOSTFILE:-}" ]; then
  LAUNCH+=(--hostfile "$HOSTFILE")
else
  LAUNCH+=(--num_gpus "${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}")
fi
exec "${LAUNCH[@]}" --module curriculum.cli train "$CONFIG" distributed.engine=deepspeed "$@"
