#!/usr/bin/env bash
# scripts/check_layers.sh can fail: on tests/fixtures/layers it must exit non-zero and name exactly the upward
# include and the file in no layer, and nothing else (the downward includes there are fine).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
output=$(bash "$here/../scripts/check_layers.sh" "$here/fixtures/layers")
status=$?
echo "$output"
expected="layers: FAIL: harness/stray.cpp is in no layer (choices: profiles harness/model harness/objectives impls harness/estimate harness/run reports harness/cli)
layers: FAIL: profiles/recorder.h:4 includes impls/strategy.h, a layer above (profiles may include only profiles)
layers: 2 violation(s) in 2 files"
[ "$status" -ne 0 ] || { echo "check_layers_refuses: FAIL: exit status 0 on a tree with an upward include"; exit 1; }
[ "$output" == "$expected" ] || { echo "check_layers_refuses: FAIL: expected:"; echo "$expected"; exit 1; }
echo "check_layers_refuses: ok"
