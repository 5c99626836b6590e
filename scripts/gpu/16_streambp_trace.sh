#!/usr/bin/env bash
# GPU step: One StreamBP step with its memory timeline, memory_viz pickle and CUPTI trace.
# scenarios/h100_streambp_trace.json through scripts/paper_gpu.sh, resumed from this step's last pack and packed
# again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step streambp_trace "$@"
