#!/usr/bin/env bash
# Installs the peers (reports/peers/) apart from the main environment, pinned and hashed:
#   .peers/streambp-official  scripts/peers/streambp-official.txt: the official StreamBP and its transformers 4.x
#   .peers/kernels            scripts/peers/kernels.txt: Liger-Kernel and cut-cross-entropy (GPU only at run time)
# Each is `pip install --no-deps --require-hashes --target`, redone only when its requirements file changes (a
# stamp in the target holds the file's sha256). Wheels come from .deps/wheels when it holds them (a GPU machine
# without network: scripts/gpu_fetch_debs.sh downloads them there and the device tool carries .deps), else from
# PyPI. The Python is the project's .venv, else python3 (PYTHON= overrides): the one the peers run under.
# scripts/build.sh runs it after the build, and a failure here is only a warning there: only the reports/peers/
# scripts and tests/test_streambp_official.cpp need the peers, and they say so when they are missing (the test
# skips, or fails under CI=true).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
source=()
if compgen -G "$root/.deps/wheels/*.whl" >/dev/null; then source=(--no-index --find-links "$root/.deps/wheels"); fi

for requirements in "$root"/scripts/peers/*.txt; do
  name="$(basename "$requirements" .txt)"
  target="$root/.peers/$name"
  stamp="$(sha256sum "$requirements" | cut -d' ' -f1)"
  [ "$(cat "$target/.requirements.sha256" 2>/dev/null)" = "$stamp" ] && continue
  echo "setup_peers: installing $name into .peers/$name" >&2
  rm -rf "$target"
  "$python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes "${source[@]}" \
    --target "$target" -r "$requirements"
  echo "$stamp" >"$target/.requirements.sha256"
done
