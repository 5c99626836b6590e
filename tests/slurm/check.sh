#!/usr/bin/env bash
# ctest entry "slurm": scripts/slurm/bpbench.sbatch against a real one-node Slurm (Debian's slurm-wlm and munge,
# which scripts/setup_test_tools.sh installs), started here with a private configuration, ports and munge key:
# sbatch --wait runs the template (one srun task starting torchrun with 2 CPU ranks), then `srun -n 2` runs
# bpbench's ranks directly (SLURM_PROCID, MASTER_ADDR/PORT exported). Both grids must measure every cell,
# single-device cells spread over the ranks, distributed ones on both. Usage: check.sh BPBENCH ROOT PYTHON
set -euo pipefail
bpbench=$1 root=$2 python=$3
for tool in munged slurmctld slurmd sbatch srun sinfo; do
  command -v "$tool" >/dev/null || { echo "slurm: $tool is missing: bash scripts/setup_test_tools.sh installs Slurm" >&2; exit 1; }
done
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm: skipped: slurmd runs jobs as their users and needs root (CI runs as root)"
  exit 77
fi

tmp=$(mktemp -d /tmp/bpbench-slurm-XXXXXX)
cleanup() {
  for pid in "$tmp"/slurmd.pid "$tmp"/slurmctld.pid "$tmp"/munged.pid; do
    if [ -f "$pid" ]; then kill "$(cat "$pid")" 2>/dev/null || true; fi
  done
  sleep 1
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "slurm: $*" >&2
  for f in "$tmp"/*.log "$tmp"/log/*; do [ -f "$f" ] && { echo "== $f"; tail -n 30 "$f"; }; done >&2
  exit 1
}
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: a key of its own, on a socket of its own.
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge.key"
munged --force --socket "$tmp/munge.sock" --key-file "$tmp/munge.key" --pid-file "$tmp/munged.pid" \
  --log-file "$tmp/munged.log" --seed-file "$tmp/munge.seed" || fail "munged did not start"

node=$(hostname -s)
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/log"
cat > "$tmp/slurm.conf" <<CONF
ClusterName=bpbench
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.sock
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
for _ in $(seq 60); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
  sleep 0.5
done
[ "$(sinfo -h -o %T 2>/dev/null)" = idle ] || fail "the node is not idle: $(sinfo 2>&1)"

cat > "$tmp/grid.json" <<JSON
{"name": "slurm", "device": "cpu", "seed": 0, "threads": 1,
 "grid": {"model": "tiny", "impl": ["plain", "streambp", "streambp-dist", "ulysses"], "objective": "sft",
          "seq_len": [32, 48], "batch": 1, "dtype": "float32", "partition": 16, "logits_partition": 16},
 "measure": {"memory": true, "grad_error": {"reference": "float64"}, "timeline": true}}
JSON
check() {  # DIR: 8 cells measured, the single-device ones by ranks 0 and 1, the distributed ones on both
  "$python" - "$1" <<'PY' || fail "$1/results.json is not the grid measured over 2 ranks"
import json, sys
cells = json.load(open(sys.argv[1] + "/results.json"))["cells"]
assert len(cells) == 8, len(cells)
for c in cells:
    assert c["status"] == "ok", (c["axes"], c.get("reason"))
    if c["axes"]["impl"] in ("streambp-dist", "ulysses"):
        assert c["world_size"] == 2 and len(c["ranks"]) == 2, c
    else:
        assert c["measured_by"]["rank"] in (0, 1), c
print(sys.argv[1], "ok:", sorted({c.get("measured_by", {}).get("rank", -1) for c in cells}))
PY
}

cd "$root"
GPUS_PER_NODE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) BPBENCH=$bpbench TORCHRUN=$root/.venv/bin/torchrun \
  timeout 240 sbatch --wait --chdir "$root" --output "$tmp/sbatch.log" \
  scripts/slurm/bpbench.sbatch "$tmp/grid.json" "$tmp/sbatch" >/dev/null || fail "sbatch failed"
check "$tmp/sbatch"
MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) timeout 240 srun -n 2 --output "$tmp/srun.log" \
  "$bpbench" run "$tmp/grid.json" --out "$tmp/srun" || fail "srun -n 2 failed"
check "$tmp/srun"
