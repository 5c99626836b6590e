#!/usr/bin/env bash
# python_checks.sh ruff|mypy: the repository's Python linted (ruff check) or type-checked (mypy), as ctest's
# python_lint and python_types run them. pyproject.toml says which files and how; scripts/requirements.txt pins
# both tools, which scripts/setup.sh installs into .venv. PYTHON (ctest gives BPBENCH_PYTHON) runs them; where it
# lacks the tool (a python3 whose own torch setup.sh used, installing nothing) the check skips (exit 77), and
# fails under CI=true, where it must run.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
tool="${1:-}"
case "$tool" in
  ruff) command=(-m ruff check) ;;
  mypy) command=(-m mypy) ;;
  *) echo "python_checks.sh: unknown check '$tool' (valid: ruff, mypy)" >&2; exit 2 ;;
esac
if ! version="$("$python" -m "$tool" --version 2>/dev/null)"; then
  message="python_checks.sh: $python has no $tool (scripts/requirements.txt pins it; scripts/setup.sh installs it)"
  [[ "${CI:-}" == true ]] && { echo "$message: under CI it must run" >&2; exit 1; }
  echo "$message: skipped" >&2
  exit 77
fi
pinned="$(grep -E "^$tool==" "$root/scripts/requirements.txt" | cut -d= -f3)"
[[ "$version" == *"$pinned"* ]] ||
  echo "python_checks.sh: warning: $version, not the pinned $pinned: its findings may differ" >&2
cd "$root" && exec "$python" "${command[@]}"
