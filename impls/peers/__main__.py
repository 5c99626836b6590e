"""python -m peers: registry.py's list, for the shell scripts.

  python -m peers list [--device cpu|cuda]   every peer's impl name, one a line (--device cpu: those that run
                                             on the CPU; cuda: every one)
  python -m peers runs cpu|cuda              the runs of that side-by-side table (scripts/cpu_peers.sh: cpu,
                                             scripts/paper_gpu.sh's peers table: cuda), one a line:
                                             DIR MODULE [OPTIONS...] (run: python -m peers.MODULE OPTIONS...,
                                             results into peers/DIR/)

Standard library only.
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.__main__
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import argparse
import sys

from . import registry


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m peers", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="every peer's impl name")
    listing.add_argument("--device", choices=registry.TABLES, default=None,
                         help="only the peers that run there (cpu: not the GPU-only ones)")
    runs = sub.add_parser("runs", help="a side-by-side table's runs: DIR MODULE [OPTIONS...]")
    runs.add_argument("table", choices=registry.TABLES)
    args = p.parse_args(argv)
    if args.command == "list":
        for peer in registry.PEERS:
            if args.device != "cpu" or not peer.gpu_only:
                print(peer.name)
    else:
        for peer in registry.table(args.table):
            print(" ".join([peer.out_name, peer.module, *peer.options]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
