#!/usr/bin/env bash
# GPU step: BP time per strategy (paper Table 1). scenarios/h100_table1_time.json through scripts/paper_gpu.sh,
# resumed from this step's last pack and packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step table1_time "$@"
