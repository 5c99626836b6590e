#!/usr/bin/env bash
# Installs what the test suite needs beyond scripts/setup.sh, and nothing that is already there:
# - Debian's Slurm (slurm-wlm: slurmctld, slurmd, sbatch, srun) and munge, which tests/slurm/check.sh starts as
#   a private one-node cluster to run scripts/slurm/bpbench.sbatch for real (about 4 MB);
# - Debian's chromium, which tests/reports/browser_check.py runs headless on report.html (about 110 MB).
# The quickstart needs none of it.
set -euo pipefail
packages=(slurm-wlm munge chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
echo "setup_test_tools: installing ${missing[*]}" >&2
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
# The packages' own services are not wanted: the test starts its daemons with a configuration of its own.
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
