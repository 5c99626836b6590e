#!/usr/bin/env bash
# Installs the peers' third-party code (impls/peers/checkouts.py) apart from the main environment, pinned, hashed:
#   .peers/streambp-official  scripts/peers/streambp-official.txt: the official StreamBP and its transformers 4.x
#   .peers/kernels            scripts/peers/kernels.txt: Liger-Kernel and cut-cross-entropy (GPU only at run time)
#   .peers/deepspeed          scripts/peers/deepspeed.txt: DeepSpeed (an sdist, built here) for ALST's tiled MLP/loss
# Each is `pip install --no-deps --require-hashes --target`, redone only when its requirements file changes (a
# stamp in the target holds the file's sha256). Wheels come from .deps/wheels when it holds them (a GPU machine
# without network: scripts/gpu_fetch_debs.sh downloads them there and the device tool carries .deps), else from
# PyPI. The Python is the project's .venv, else python3 (PYTHON= overrides): the one the peers run under.
# scripts/build.sh runs it after the build, and a failure here is only a warning there: only the impls/peers/
# modules and tests/peers/test_streambp_official.cpp need the peers, and they say so when they are missing (the test
# skips, or fails under CI=true).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
source=()
if compgen -G "$root/.deps/wheels/*.whl" >/dev/null; then source=(--no-index --find-links "$root/.deps/wheels"); fi

install() {  # install REQUIREMENTS TARGET [pip options]: one peer, afresh
  rm -rf "$2"
  "$python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes "${@:3}" --target "$2" -r "$1"
}
failed=()
for requirements in "$root"/scripts/peers/*.txt; do
  name="$(basename "$requirements" .txt)"
  target="$root/.peers/$name"
  stamp="$(sha256sum "$requirements" | cut -d' ' -f1)"
  [ "$(cat "$target/.requirements.sha256" 2>/dev/null)" = "$stamp" ] && continue
  echo "setup_peers: installing $name into .peers/$name" >&2
  # Carried wheels that lack a peer's files (DeepSpeed is an sdist, which gpu_fetch_debs.sh's binary-only download
  # does not fetch) leave that peer to the index, tried briefly (without network it fails in seconds); and one
  # peer that cannot be installed leaves the others installed (the exit status is still 1).
  if ! install "$requirements" "$target" "${source[@]}" &&
     ! { ((${#source[@]})) && echo "setup_peers: $name: not all in .deps/wheels; from the index" >&2 &&
         install "$requirements" "$target" --retries 0 --timeout 10; }; then
    echo "setup_peers: $name was not installed" >&2
    rm -rf "$target"
    failed+=("$name")
    continue
  fi
  echo "$stamp" >"$target/.requirements.sha256"
done
if ((${#failed[@]})); then
  echo "setup_peers: not installed: ${failed[*]}" >&2
  exit 1
fi
