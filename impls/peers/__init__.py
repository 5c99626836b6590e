"""peers: what a user would run instead of bpbench's strategies, measured on the same network and meter and
written as bpbench results cells (impls/registry.cpp's peer_names(): bpbench reads their cells, never runs
them).

One way to run a peer: the folder holding this package (impls/) on PYTHONPATH, then `python -m peers.MODULE`:

  PYTHONPATH=impls .venv/bin/python -m peers.hf_checkpoint --model tiny --seq-len 256 --device cpu \\
      --dtype float32 --out out/hf_checkpoint/results.json
  PYTHONPATH=impls .venv/bin/python -m peers list      # every peer's impl name (registry.py)
  PYTHONPATH=impls .venv/bin/python -m peers runs cpu  # scripts/cpu_peers.sh's runs: DIR MODULE [OPTIONS]

(A module run by its file's path, `python impls/peers/hf_checkpoint.py ...`, starts itself again that way:
launch.py.)

  interface.py   the peer interface (Peer, and the optional hooks) and the memory meter's, as typing.Protocols
  registry.py    every peer: its impl name, module, options, GPU-only reason, third-party checkout, tables
  common.py      the command line, the measured step, results cells and --resume that every peer shares
  launch.py      how a peer process starts (python -m peers.MODULE, the package on PYTHONPATH)
  checkouts.py   the third-party code of .peers/ (scripts/setup_peers.sh), the one thing put on sys.path
  cpu_meter.py, heap_policy.py   bpbench's CPU memory meter and heap settings inside a peer's process
  hf_checkpoint.py               hf-checkpoint, hf (--no-checkpointing), hf-checkpoint-offload (--offload)
  streambp_official.py           streambp-official, the authors' StreamBP (PyPI streambp==1.0)
  streambp_official_upstream.py  loads and wraps that upstream code, with its transformers 4.51.3
  streambp_official_exactness.py its loss and gradients in float64 against plain BP (tests/peers/*.cpp)
  fused_loss.py, liger_flce.py, cce.py   liger-flce, cce: fused linear cross-entropy kernels (GPU only)
  alst_tiled.py, alst_ulysses.py         alst-tiled, alst-ulysses: ALST through DeepSpeed
  alst_ulysses_rank.py                   one rank (a worker process) of alst-ulysses

Nothing here is imported by the package itself at import time: `import peers` is free.
"""
