#!/usr/bin/env bash
# GPU step: Gemma 3-1B BP memory at 3k-18k tokens (rebuttal), with Hugging Face checkpointing beside it.
# scenarios/h100_gemma_memory.json through scripts/paper_gpu.sh, resumed from this step's last pack and packed
# again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step gemma_memory "$@"
