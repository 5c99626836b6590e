#!/usr/bin/env bash
# GPU step: The longest sequence with layer checkpoints offloaded to pinned host memory.
# scenarios/h100_offload_maxlen.json through scripts/paper_gpu.sh, resumed from this step's last pack and packed
# again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step offload_maxlen "$@"
