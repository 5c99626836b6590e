#!/usr/bin/env bash
# check.sh: the whole GPU pass as ONE device-tool command, on a fresh machine, ending packed before one deadline.
#
#   bash scripts/gpu/check.sh OUT          # OUT: the folder the device tool brings back ($OUT)
#
# A lent GPU comes with 15 minutes of machine time in all (its start, every command, every idle wait), one
# command runs at most 10 minutes, and the machine is gone 30 s after a command returns; at most 8 files (16 MiB
# each, 64 MiB together) come back. So this script assumes nothing from an earlier command, and every stage gets
# only the time that is left before DEADLINE_S (counted from its start) less PACK_RESERVE_S for the pack:
#   probe         one line each: GPU, driver, torch and its CUDA, nvcc/CUPTI/NVTX/NCCL, compilers, disk
#   build         bpbench and the device tests only (no tests, peers or benchmarks), every core, no debug info
#   device_tests  tests/device/, one case at a time, each with its own timeout; results by name
#   the checks    true numbers, cheapest-first within what matters most (scenarios/gpu_check/):
#                 qwen3_8b (every strategy at 8k and 32k: peak, reserved, estimate, time, MFU), llama_rows (the
#                 paper's Llama-3.1-8B rows), snapshot (a memory_viz pickle opened by torch.cuda._memory_viz,
#                 its peak and phases checked), peers (transformers' checkpointing and the official StreamBP at
#                 8k), streambp_maxlen (a probe at the estimate's longest Qwen3-8B length and one a step
#                 above)
#   pack          OUT/check.log, OUT/check-pack.tar.gz (every results.json, report, stage log, status.tsv),
#                 and at most 6 more files of large outputs (OUT/check-large-N.tar.gz), 60 MiB in all
# A stage that would not fit in the time left (its expected seconds, CHECK_EXPECTED_S) is not started and the
# next, cheaper one gets its turn; a stage that runs out of its time (what is left, and for a check at most
# CHECK_CAP_FACTOR times its expected seconds) is stopped, its whole process group, and recorded as not
# finished; either way the pack is made. The log's last lines say what ran, what did not, and
# the pack's name. scripts/gpu/continue.sh OUT PACK goes on from such a pack with a second command.
#
# Environment: DEADLINE_S (540), PACK_RESERVE_S (20), DEVICE (cuda; cpu: the CPU dry run of
# tests/gpu_check/dry_run.sh), PYTHON (python3: the machine's torch), BUILD_DIR (build-gpu), CHECK_WORK
# (gpu-check: what is measured, git-ignored), CHECK_SCENARIOS (scenarios/gpu_check), CHECKS (the checks to run,
# in order; default all), CHECK_PEERS (the peers stage's runs, in order; default hf_checkpoint hf
# streambp_official), TEST_TIMEOUT_S (120: one device test), DEVICE_TESTS_ONLY (a regular expression: only
# the device tests it matches; the dry run's few), BPBENCH and DEVICE_TESTS (use these binaries
# and skip the build), CHECK_FROM_PACK (continue.sh's pack), CHECK_HANG_IN (a stage name: that stage hangs
# first, as a stuck kernel would; the dry run's planted hang).
set -uo pipefail
check_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$check_root/scripts/gpu/check_lib.sh"

if [[ "${1:-}" == --stage ]]; then  # one stage, run under its time limit by run_stage (check_lib.sh)
  stage_"$2"
  exit $?
fi
check_begin "${1:?usage: bash scripts/gpu/check.sh OUT (OUT: the folder the device tool brings back)}"
run_stage probe 5 20
if [[ -n "${BPBENCH:-}" ]]; then
  record build skipped 0 "BPBENCH=$BPBENCH given"
else
  run_stage build "$(expected build)"
fi
if [[ -n "${CHECK_FROM_PACK:-}" ]]; then
  record device_tests skipped 0 "continue.sh: the device tests ran in the first command"
else
  run_stage device_tests "$(expected device_tests)" "$(cap_of device_tests)"
fi
for check in ${CHECKS:-$ALL_CHECKS}; do run_stage "$check" "$(expected "$check")" "$(cap_of "$check")"; done
check_pack
