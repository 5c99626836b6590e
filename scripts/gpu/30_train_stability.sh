#!/usr/bin/env bash
# GPU step: 500-step training runs of every strategy on real text (rebuttal; an H200: more than 80 GB).
# scenarios/h100_train_stability.json through scripts/paper_gpu.sh, resumed from this step's last pack and
# packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step train_stability "$@"
