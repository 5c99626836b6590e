#!/usr/bin/env bash
# ctest entry "docs_commands_refuses": the docs test must fail on planted drifts, each named by page and line:
# a number changed in a pasted estimate output, a family removed from a list made from the registry, a
# scenario left out of the scenarios table, and families listed by hand.
# Usage: doc_commands_refuses.sh BPBENCH ROOT
set -euo pipefail
bpbench=$1 root=$2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work=$(mktemp -d /tmp/bpbench-docs-refuses-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "docs_commands_refuses: $*" >&2; cat "$work/err.txt" >&2 2>/dev/null || true; exit 1; }

# An estimate's pasted peak off by one byte, and Mixtral gone from the families' list.
sed -e 's/ulysses                        262144      77476282368/ulysses                        262144      77476282369/' \
  -e 's/Qwen3-MoE,$/Qwen3-MoE,/; s/^Mixtral, OLMo 2/OLMo 2/' "$root/docs/estimate.md" >"$work/estimate.md"
cmp -s "$root/docs/estimate.md" "$work/estimate.md" && fail "the planted drifts did not change the page"
# The scenarios table without its ci.json row, and a sentence that lists families by hand.
grep -v '^| `scenarios/ci.json`' "$root/docs/scenarios.md" >"$work/scenarios.md"
printf '\nThe shipped scenarios cover Qwen3, Qwen2, Llama, Mistral and Phi-3.\n' >>"$work/scenarios.md"

set +e
python3 "$here/doc_commands.py" --bpbench "$bpbench" --root "$root" "$work/estimate.md" "$work/scenarios.md" \
  >"$work/out.txt" 2>"$work/err.txt"
status=$?
set -e
[ "$status" -eq 1 ] || fail "exit $status on planted drifts, expected 1"
line=$(grep -n '^\$ bpbench estimate --model llama3.1-8b --impl ulysses,streambp-ulysses' "$work/estimate.md" | cut -d: -f1)
grep -q "estimate.md:$line: .*output line 5 differs" "$work/err.txt" || fail "the changed peak was not named at line $line"
grep -q "expected: ulysses .*77476282369" "$work/err.txt" || fail "the first differing line was not shown"
grep -q "estimate.md:[0-9]*: the list is not what \`bpbench list families --names\` prints" "$work/err.txt" ||
  fail "the removed family was not found"
grep -q "scenarios.md:[0-9]*: the table leaves out scenarios/ci.json" "$work/err.txt" || fail "the missing row was not found"
grep -q "scenarios.md:[0-9]*: a hand-kept list of families (Qwen3, Qwen2, Llama, Mistral, Phi-3)" "$work/err.txt" ||
  fail "the hand-kept list was not found"
echo "docs_commands_refuses: the four planted drifts are refused:"
sed 's/^/  /' "$work/err.txt" | grep "FAIL"
