#!/usr/bin/env bash
# GPU step: Llama-3.1-8B BP memory and time at 3k-18k tokens (paper Tables 2-3), with Hugging Face checkpointing
# beside it. scenarios/h100_llama_memory_time.json through scripts/paper_gpu.sh, resumed from this step's last
# pack and packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step llama_memory_time "$@"
