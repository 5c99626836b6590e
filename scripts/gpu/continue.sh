#!/usr/bin/env bash
# continue.sh: a second device-tool command after scripts/gpu/check.sh, for the GPU time that is left (3-5
# minutes): the same stages, continuing from the pack the first command brought back, skipping every stage the
# pack holds as done and the device tests; a check stopped part-way resumes its results.json (bpbench run
# --resume keeps the finished cells). On a fresh machine it builds again first (the build does not travel).
#
#   bash scripts/gpu/continue.sh OUT PACK    # PACK: check-pack.tar.gz, carried (e.g. in gpu-packs/)
#
# DEADLINE_S defaults to 270 here; every other setting is check.sh's.
set -euo pipefail
pack="${2:?usage: bash scripts/gpu/continue.sh OUT PACK (PACK: the check-pack.tar.gz of check.sh)}"
[[ -f "$pack" ]] || { echo "continue.sh: no pack at $pack (valid: a check-pack.tar.gz that check.sh wrote)" >&2; exit 2; }
CHECK_FROM_PACK="$(cd "$(dirname "$pack")" && pwd)/$(basename "$pack")" DEADLINE_S="${DEADLINE_S:-270}" \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/check.sh" "$1"
