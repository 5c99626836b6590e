#!/usr/bin/env bash
# scripts/check_layers.sh can fail: on tests/fixtures/layers it must exit non-zero and name exactly the upward
# includes (a recorder reaching into the strategies' interface, and shared machinery into a strategy: the folder
# cycle the layers forbid) and the file in no layer, and nothing else (the downward includes there are fine).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
output=$(bash "$here/../scripts/check_layers.sh" "$here/fixtures/layers")
status=$?
echo "$output"
expected="layers: FAIL: harness/stray.cpp is in no layer (choices: profiles harness/model harness/objectives impls/interface impls/machinery impls harness/estimate harness/run reports harness/cli)
layers: FAIL: impls/machinery/layerwise.h:4 includes impls/streambp.h, a layer above (impls/machinery may include only profiles harness/model harness/objectives impls/interface impls/machinery)
layers: FAIL: profiles/recorder.h:4 includes impls/interface/strategy.h, a layer above (profiles may include only profiles)
layers: 3 violation(s) in 4 files"
[ "$status" -ne 0 ] || { echo "check_layers_refuses: FAIL: exit status 0 on a tree with an upward include"; exit 1; }
[ "$output" == "$expected" ] || { echo "check_layers_refuses: FAIL: expected:"; echo "$expected"; exit 1; }
echo "check_layers_refuses: ok"
