"""heap_policy.py: a peer's CPU times on the terms of bpbench's own (profiles/heap_policy.h).

bpbench's processes keep freed heap memory (glibc's mmap threshold at 32 MiB, no trimming below 1 GiB), so a
timed step does not fault in again pages that glibc handed back to the kernel. glibc reads these settings
only when a process starts: a peer module calls keep_freed_heap_memory() first thing under __main__, before
torch is imported, and starts itself again once with them (the same command line: `python -m peers.NAME ...`).
An importing test never restarts anything.
No third-party imports here: this runs before them.
"""

from __future__ import annotations

import os
import platform
import sys

TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"
NOTE = "freed memory kept: glibc's mmap threshold 32 MiB, trim threshold 1 GiB (GLIBC_TUNABLES)"


def is_set() -> bool:
    return TUNABLES in os.environ.get("GLIBC_TUNABLES", "")


def keep_freed_heap_memory() -> None:
    if is_set() or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES"), TUNABLES) if t)
    # sys.orig_argv: the interpreter's own command line, `-m peers.NAME` included (sys.argv[0] is the file).
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
