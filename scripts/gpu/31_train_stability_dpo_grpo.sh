#!/usr/bin/env bash
# GPU step: DPO and GRPO training runs (rebuttal; an H200). scenarios/h100_train_stability_dpo_grpo.json through
# scripts/paper_gpu.sh, resumed from this step's last pack and packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step train_stability_dpo_grpo "$@"
