#!/usr/bin/env bash
# The test_groups check can fail: given ctest's entries with one shard left out and one case registered twice,
# it must exit non-zero and name both faults.
set -euo pipefail
: "${BINARY:?}" "${BUILD_DIR:?}" "${PYTHON:?}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$BUILD_DIR" && ctest --show-only=json-v1) >"$tmp/good.json"
"$PYTHON" - "$tmp/good.json" "$tmp/bad.json" <<'PY'
import copy, json, sys
shown = json.load(open(sys.argv[1]))
tests = shown["tests"]
shard = next(t for t in tests if t["name"] == "shard_1_of_" + t["name"].rsplit("_", 1)[-1])
single = next(t for t in tests if t.get("command") and t["command"][0].endswith("/bpbench_tests") and any(a.startswith("--gtest_filter=") and "*" not in a
                                                           and ":" not in a and not a.startswith("--gtest_filter=-")
                                                           for a in t["command"]))
twice = copy.deepcopy(single)
twice["name"] += "_again"
shown["tests"] = [t for t in tests if t is not shard] + [twice]
json.dump(shown, open(sys.argv[2], "w"))
print(single["name"])
PY
set +e
out="$("$PYTHON" "$here/check_test_groups.py" --binary "$BINARY" --build-dir "$BUILD_DIR" --ctest-json "$tmp/bad.json")"
rc=$?
set -e
echo "$out" | tail -n 5
((rc != 0)) || { echo "FAIL: the check passed entries with a shard missing and a case twice"; exit 1; }
grep -q '^no ctest entry runs ' <<<"$out" || { echo "FAIL: the missing shard's cases were not named"; exit 1; }
grep -q ' runs in 2 entries: ' <<<"$out" || { echo "FAIL: the case registered twice was not named"; exit 1; }
echo "PASS: the check refuses a missing shard and a case registered twice"
