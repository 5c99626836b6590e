#!/usr/bin/env python3
"""Writes the ctest entries of bpbench_tests: N shards that share a process, one process per case for the
cases that tests/test_groups.txt names fresh or slow (or GoogleTest disables), and one process for each
`together` group.

Run after each build of the test binary (tests/CMakeLists.txt); ctest includes the file it writes.
Usage: discover_test_groups.py --binary EXE --groups test_groups.txt --shards N --working-dir DIR --out FILE
"""
import argparse
import re
import subprocess
import sys

SKIPPED = r"\[  SKIPPED \]"  # GoogleTest's line for a case that skipped itself: ctest marks the entry skipped
# OpenMP threads that wait for work sleep instead of spinning: ctest -j N runs N processes of N intra-op
# threads each, and spinning threads took the cores from one another (on 2 cores the longest case took 4.5
# times as long under ctest -j 2 as alone). The thread count itself stays LibTorch's default: CPU peaks depend
# on it (one thread per process put a bf16 cell's measured peak 5.4% from its estimate, past the 5% the test
# allows). Every results.json bpbench writes under the tests is checked against reports/results.schema.json
# (harness/run/results.cpp, ResultsWriter).
TEST_ENVIRONMENT = "OMP_WAIT_POLICY=PASSIVE;BPBENCH_VALIDATE_RESULTS=1"


def list_cases(binary):
    """Every case the binary holds, in its order, as 'Suite.Case' (DISABLED_ ones included)."""
    out = subprocess.run([binary, "--gtest_list_tests"], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    cases: list[str] = []
    suite = ""
    for line in out.splitlines():
        if not line.strip() or line.startswith(("Running main()", "Note:")):
            continue
        name = line.split("#", 1)[0].strip()  # "Case/3  # GetParam() = ..."
        if line.startswith("  "):
            cases.append(suite + name)
        else:
            suite = name  # "Prefix/Suite."
    return cases


def read_groups(path):
    """[(group, compiled regex)] from 'fresh REGEX', 'slow REGEX' and 'together NAME REGEX' lines (the group
    of the last is 'together:NAME'); '#' starts a comment line."""
    groups = []
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        group, _, pattern = line.partition(" ")
        if group == "together":
            name, _, pattern = pattern.strip().partition(" ")
            group = f"together:{name}" if re.fullmatch(r"[a-z0-9_]+", name) else ""
        if (group not in ("fresh", "slow") and not group.startswith("together:")) or not pattern.strip():
            sys.exit(f"{path}:{number}: expected 'fresh REGEX', 'slow REGEX' or 'together NAME REGEX' "
                     f"(NAME in [a-z0-9_]+), got: {line}")
        groups.append((group, re.compile(pattern.strip())))
    return groups


def is_disabled(case):
    suite, _, test = case.partition(".")
    return suite.split("/")[-1].startswith("DISABLED_") or test.startswith("DISABLED_")


def group_of(case, groups):
    """slow before fresh before the first together group that matches; "shared" (a shard) when none does."""
    if is_disabled(case):
        return "disabled"
    matched = [group for group, regex in groups if regex.search(case)]
    for group in ("slow", "fresh"):
        if group in matched:
            return group
    return matched[0] if matched else "shared"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--groups", required=True)
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--working-dir", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    cases = list_cases(args.binary)
    groups = read_groups(args.groups)
    by_group: dict[str, list[str]] = {"shared": [], "fresh": [], "slow": [], "disabled": []}
    for group, _ in groups:
        by_group.setdefault(group, [])
    for case in cases:
        by_group[group_of(case, groups)].append(case)

    lines = [f"# Written by {__file__} from {args.groups}: {len(cases)} cases, "
             + ", ".join(f"{len(v)} {k}" for k, v in by_group.items())]

    def add(name, filter_, properties, also_disabled=True, report=None):
        extra = " --gtest_also_run_disabled_tests" if also_disabled else ""
        if report:
            extra += f" [==[--gtest_output=json:{report}]==]"
        lines.append(f"add_test([=[{name}]=] {args.binary} [==[--gtest_filter={filter_}]==]{extra})")
        lines.append(f"set_tests_properties([=[{name}]=] PROPERTIES WORKING_DIRECTORY {args.working_dir} "
                     + properties + ")")

    # One process per case, named as the case (as gtest_discover_tests named them; a disabled case without
    # its DISABLED_ prefix, registered disabled).
    for group in ("slow", "fresh", "disabled"):
        for case in by_group[group]:
            properties = (f"SKIP_REGULAR_EXPRESSION [==[{SKIPPED}]==] ENVIRONMENT [==[{TEST_ENVIRONMENT}]==] "
                          "TIMEOUT 900 "
                          f"LABELS {group}")
            if group == "slow":
                properties += " COST 1000"  # started first: the longest cases bound the suite's wall time
            if group == "disabled":
                properties += " DISABLED TRUE"
            add(case.replace("DISABLED_", ""), case, properties)

    # A together group: its cases in one process, as they share work that a shard would split (the distributed
    # suites' rank launches: dealt over N shards, each world size's ranks started N times).
    for group, members in by_group.items():
        if group.startswith("together:") and members:
            name = group.removeprefix("together:")
            add(name, ":".join(members),
                f"ENVIRONMENT [==[{TEST_ENVIRONMENT}]==] TIMEOUT 900 LABELS together COST 100",
                also_disabled=False, report=f"{args.working_dir}/shard-reports/{name}.json")

    # The shards: everything else, dealt out by GoogleTest itself (case i of the filtered list to shard
    # i % N).
    shards = max(1, min(args.shards, len(by_group["shared"])))
    own_process = [c for group, members in by_group.items() if group not in ("shared", "disabled")
                   for c in members]
    exclude = ("-" + ":".join(own_process)) if own_process else "*"
    if by_group["shared"]:
        for k in range(shards):
            # No SKIP_REGULAR_EXPRESSION: one skipped case must not hide the others' result. Each shard writes
            # GoogleTest's JSON report, from which scripts/test.sh names the cases skipped inside shards.
            name = f"shard_{k + 1}_of_{shards}"
            add(name, exclude,
                f"ENVIRONMENT [==[GTEST_TOTAL_SHARDS={shards};GTEST_SHARD_INDEX={k};{TEST_ENVIRONMENT}]==] "
                "TIMEOUT 1800 "
                "LABELS shard COST 100", also_disabled=False,
                report=f"{args.working_dir}/shard-reports/{name}.json")

    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
