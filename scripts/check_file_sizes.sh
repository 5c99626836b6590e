#!/usr/bin/env bash
# Every source file stays under 600 lines (ctest entry "file_sizes"): a file that grows past it has more than
# one job and is split by what it does. C++, CUDA, Python and shell sources under the project's folders, test
# fixtures aside. Usage: bash scripts/check_file_sizes.sh [ROOT] [LIMIT]
set -uo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
limit="${2:-600}"
over=0
checked=0
while IFS= read -r file; do
  checked=$((checked + 1))
  lines=$(wc -l < "$file")
  if [ "$lines" -gt "$limit" ]; then
    echo "file_sizes: FAIL: ${file#"$root"/} has $lines lines (at most $limit: split it by what it does)"
    over=$((over + 1))
  fi
done < <(find "$root"/harness "$root"/impls "$root"/profiles "$root"/reports "$root"/tests "$root"/scripts \
  "$root"/.ci -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.py' -o -name '*.sh' -o -name '*.js' \) \
  -not -path '*/tests/fixtures/*' 2>/dev/null | sort)
if [ "$checked" -eq 0 ]; then
  echo "file_sizes: FAIL: no sources found under $root"
  exit 1
fi
if [ "$over" -gt 0 ]; then
  echo "file_sizes: $over of $checked files over $limit lines"
  exit 1
fi
echo "file_sizes: ok: $checked files, none over $limit lines"
