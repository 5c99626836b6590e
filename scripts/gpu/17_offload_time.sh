#!/usr/bin/env bash
# GPU step: The exposed copy time of offloaded checkpoints. scenarios/h100_offload_time.json through
# scripts/paper_gpu.sh, resumed from this step's last pack and packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step offload_time "$@"
