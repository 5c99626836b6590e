#!/usr/bin/env bash
# GPU step: Memory and time against the partition size (paper Figure 5). scenarios/h100_fig5_partition.json
# through scripts/paper_gpu.sh, resumed from this step's last pack and packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step fig5_partition "$@"
