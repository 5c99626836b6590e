#!/usr/bin/env bash
# GPU step: Qwen3-8B at 8k/16k/32k: bpbench beside the official StreamBP, Hugging Face checkpointing, Liger FLCE
# and cut-cross-entropy. scenarios/h100_peers.json through scripts/paper_gpu.sh, resumed from this step's last
# pack and packed again (scripts/gpu/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
table_step peers "$@"
