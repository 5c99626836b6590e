#!/usr/bin/env python3
"""Checks that ctest runs every GoogleTest case of bpbench_tests exactly once (ctest entry "test_groups").

It reads what ctest will run (`ctest --show-only=json-v1`: each entry's command line and environment), asks
the which cases each entry's filter selects and deals a shard's cases out as GoogleTest does (both rules
checked against GoogleTest itself: a few filters listed by the binary, a few cheap cases run in real shards),
and fails, naming them, on any case that no entry runs or that two entries run.
Usage: check_test_groups.py --binary EXE --build-dir DIR [--ctest-json FILE]
"""
import argparse
import collections
import fnmatch
import json
import os
import subprocess
import sys
import tempfile


def gtest_list(binary, filter_="*"):
    """The cases the filter selects, in the binary's order, DISABLED_ ones included."""
    out = subprocess.run([binary, f"--gtest_filter={filter_}", "--gtest_list_tests"], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    cases, suite = [], ""
    for line in out.splitlines():
        if line.startswith("  "):
            cases.append(suite + line.split("#")[0].strip())
        elif line.endswith(".") or ".  #" in line:
            suite = line.split("#")[0].strip()
    return cases


def gtest_filter_selects(filter_, case):
    """GoogleTest's --gtest_filter: 'POSITIVE[-NEGATIVE]', each ':'-separated wildcard patterns (* and ?)."""
    positive, _, negative = filter_.partition("-")
    def any_match(patterns):
        return any(fnmatch.fnmatchcase(case, p) for p in patterns.split(":") if p)
    return any_match(positive or "*") and not any_match(negative)


def disabled(case):
    suite, _, test = case.partition(".")
    return suite.split("/")[-1].startswith("DISABLED_") or test.startswith("DISABLED_")


def shard_share(cases, total, index, run_disabled):
    """GoogleTest's sharding: the runnable cases, numbered in order, case i to shard i % total."""
    runnable = [c for c in cases if run_disabled or not disabled(c)]
    return [c for i, c in enumerate(runnable) if i % total == index]


def check_rule_against_gtest(binary):
    """Runs a few cheap cases in 3 real shards and compares what ran with shard_share's prediction."""
    sample = "Compare.*:BlockLedger.*"
    listed = gtest_list(binary, sample)
    if len(listed) < 3:
        return [f"the sharding check's sample '{sample}' lists {len(listed)} cases: pick another"]
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(3):
            report = os.path.join(tmp, f"shard{index}.json")
            env = dict(os.environ, GTEST_TOTAL_SHARDS="3", GTEST_SHARD_INDEX=str(index))
            subprocess.run([binary, f"--gtest_filter={sample}", f"--gtest_output=json:{report}"], env=env,
                           check=True, capture_output=True, timeout=300)
            suites = json.load(open(report))["testsuites"]
            ran = [f"{s['name']}.{t['name']}" for s in suites for t in s["testsuite"]]
            predicted = shard_share(listed, 3, index, run_disabled=False)
            if sorted(ran) != sorted(predicted):
                problems.append(f"GoogleTest's shard {index} of 3 ran {ran}, the rule predicts {predicted}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--ctest-json", help="ctest --show-only=json-v1 output to check instead of the build's")
    args = ap.parse_args()
    binary = os.path.realpath(args.binary)

    every_case = gtest_list(binary)
    if args.ctest_json:
        shown = open(args.ctest_json, encoding="utf-8").read()
    else:
        shown = subprocess.run(["ctest", "--show-only=json-v1"], cwd=args.build_dir, check=True,
                               capture_output=True, text=True, timeout=120).stdout
    runs = collections.defaultdict(list)  # case -> the ctest entries that run it
    entries = 0
    problems, checked_filters = [], set()
    for test in json.loads(shown)["tests"]:
        command = test.get("command") or []
        if not command or os.path.realpath(command[0]) != binary:
            continue
        entries += 1
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        env = dict(e.split("=", 1) for e in props.get("ENVIRONMENT", []))
        filters = [a.split("=", 1)[1] for a in command[1:] if a.startswith("--gtest_filter=")]
        run_disabled = "--gtest_also_run_disabled_tests" in command
        filter_ = filters[-1] if filters else "*"
        selected = [c for c in every_case if gtest_filter_selects(filter_, c)]
        kind = "negative" if "-" in filter_ else "positive"
        if kind not in checked_filters:  # the filter rule against GoogleTest, once for each kind of filter
            checked_filters.add(kind)
            if gtest_list(binary, filter_) != selected:
                problems.append(f"GoogleTest's filter {filter_[:80]}... selects other cases than predicted")
        if "GTEST_TOTAL_SHARDS" in env:
            selected = shard_share(selected, int(env["GTEST_TOTAL_SHARDS"]), int(env["GTEST_SHARD_INDEX"]),
                                   run_disabled)
        elif not run_disabled:
            selected = [c for c in selected if not disabled(c)]
        for case in selected:
            runs[case].append(test["name"])

    problems += check_rule_against_gtest(binary)
    missing = [c for c in every_case if not runs.get(c)]
    twice = {c: names for c, names in runs.items() if len(names) > 1}
    problems += [f"{c} runs in {len(n)} entries: {', '.join(n)}" for c, n in twice.items()]
    problems += [f"no ctest entry runs {c}" for c in missing]
    if problems:
        print("\n".join(problems[:50]))
        print(f"test_groups: {len(problems)} problems ({len(every_case)} cases, {entries} ctest entries)")
        sys.exit(1)
    print(f"test_groups: each of the {len(every_case)} cases runs in exactly one of {entries} ctest entries")


if __name__ == "__main__":
    main()
