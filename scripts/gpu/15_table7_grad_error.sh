#!/usr/bin/env bash
# GPU step: Gradient error in float32 and bfloat16 against a float64 reference on the CPU (paper Table 7).
# scenarios/h100_table7_grad_error.json through scripts/paper_gpu.sh, resumed from this step's last pack and
# packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step table7_grad_error "$@"
