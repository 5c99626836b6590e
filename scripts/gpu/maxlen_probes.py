"""maxlen_probes.py: a scenario of two probes around the estimate's longest length, for scripts/gpu/check.sh.

    python3 scripts/gpu/maxlen_probes.py TEMPLATE.json BPBENCH OUT.json

TEMPLATE is a one-cell scenario with a memory budget (scenarios/gpu_check/streambp_maxlen.json). `bpbench
estimate --json` gives the longest multiple of MAXLEN_GRANULARITY (4096) tokens whose estimated peak fits
measure.budget_bytes for the template's model, impl and setting on its device; OUT.json is the template with
seq_len set to that length and to one step above it. The first probe should fit and the second should not:
together they test the estimate's answer on the device, each an ordinary cell (an oom is a result).
"""
import json
import os
import subprocess
import sys


def main():
    template_path, bpbench, out_path = sys.argv[1:4]
    scenario = json.load(open(template_path))
    grid, measure = scenario["grid"], scenario.get("measure", {})
    granularity = int(os.environ.get("MAXLEN_GRANULARITY", "4096"))
    budget = measure.get("budget_bytes")
    if not budget:
        print(f"maxlen_probes: {template_path} has no measure.budget_bytes to search within")
        return 2
    command = [bpbench, "estimate", "--model", str(grid["model"]), "--impl", str(grid["impl"]),
               "--budget", str(budget), "--granularity", str(granularity),
               "--device", scenario.get("device", "cpu"), "--dtype", str(grid.get("dtype", "float32")),
               "--objective", str(grid.get("objective", "sft")),
               "--batch", str(grid.get("batch", 1)), "--json"]
    for key, flag in (("partition", "--partition"), ("logits_partition", "--logits-partition")):
        if key in grid:
            command += [flag, str(grid[key])]
    if scenario.get("threads"):
        command += ["--threads", str(scenario["threads"])]
    answer = subprocess.run(command, capture_output=True, text=True)
    if answer.returncode != 0:
        print(f"maxlen_probes: {' '.join(command)} failed: {answer.stderr.strip()}")
        return 1
    longest = json.loads(answer.stdout)["longest"]["budgets"][0]["impls"][0]
    seq_len = longest.get("seq_len")
    if not seq_len:
        print(f"maxlen_probes: the estimate found no length within {budget} bytes: {longest}")
        return 1
    grid["seq_len"] = [seq_len, seq_len + granularity]
    scenario["name"] = scenario.get("name", "maxlen") + "_probes"
    with open(out_path, "w") as f:
        json.dump(scenario, f, indent=2)
    print(f"maxlen_probes: the estimate's longest {grid['impl']} length within {budget} bytes is {seq_len} "
          f"(estimated peak {longest.get('peak_bytes')} bytes, {longest.get('dominant_phase')}); probes at "
          f"{seq_len} and {seq_len + granularity}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
