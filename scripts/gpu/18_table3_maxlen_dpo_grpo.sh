#!/usr/bin/env bash
# GPU step: The longest DPO and GRPO sequence per strategy (paper Table 3).
# scenarios/h100_table3_maxlen_dpo_grpo.json through scripts/paper_gpu.sh, resumed from this step's last pack
# and packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step table3_maxlen_dpo_grpo "$@"
