#!/usr/bin/env bash
# scripts/check_paths.py can fail: on a tiny tree with a README.md link to a missing file and a C++ comment naming a
# missing header it must exit non-zero naming both (FILE:LINE), and once both are fixed it must pass.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
fail() { echo "check_paths_refuses: FAIL: $*"; exit 1; }

mkdir -p "$tree/notes" "$tree/harness/model"
cat >"$tree/README.md" <<'EOF'
# fixture

See [the guide](notes/guide.md#usage) and [what is missing](notes/missing.md).
EOF
cat >"$tree/notes/guide.md" <<'EOF'
# Guide

## Usage

Back to the [README](../README.md).
EOF
cat >"$tree/harness/model/model.cpp" <<'EOF'
// model.cpp: the model (see harness/nothing.h for its interface).
#include "harness/model/model.h"
EOF
printf '#pragma once\n' >"$tree/harness/model/model.h"
git -C "$tree" init -q || fail "git init"

output=$("$python" "$here/../scripts/check_paths.py" "$tree" 2>&1)
status=$?
echo "$output"
[ "$status" -ne 0 ] || fail "exit status 0 on a tree with a broken link and a missing path"
grep -qx "README.md:3: link notes/missing.md: notes/missing.md does not exist" <<<"$output" ||
  fail "the broken link in README.md:3 was not named"
grep -qx "harness/model/model.cpp:1: harness/nothing.h does not exist" <<<"$output" ||
  fail "the missing path in harness/model/model.cpp:1 was not named"
[ "$(grep -c ': ' <<<"$output")" -eq 3 ] || fail "expected exactly two problems and the summary line"

# Fixed: the link leads to a file, the comment names the real header.
sed -i 's|(notes/missing.md)|(notes/guide.md)|' "$tree/README.md"
sed -i 's|harness/nothing.h|harness/model/model.h|' "$tree/harness/model/model.cpp"
output=$("$python" "$here/../scripts/check_paths.py" "$tree" 2>&1)
status=$?
echo "$output"
[ "$status" -eq 0 ] || fail "exit status $status once both were fixed"
echo "check_paths_refuses: ok"
