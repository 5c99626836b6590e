"""heap_policy.py: a peer's CPU times on the terms of bpbench's own (profiles/heap_policy.h).

bpbench's processes keep freed heap memory (glibc's mmap threshold at 32 MiB, no trimming below 1 GiB), so a
timed step does not fault in again pages that glibc handed back to the kernel. glibc reads these settings
only when a process starts: a peer script calls keep_freed_heap_memory() first thing under __main__, before
torch is imported, and starts itself again once with them. An importing test never restarts anything.
No third-party imports here: this runs before them.
"""

import os
import platform
import sys

TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"
NOTE = "freed memory kept: glibc's mmap threshold 32 MiB, trim threshold 1 GiB (GLIBC_TUNABLES)"


def is_set():
    return TUNABLES in os.environ.get("GLIBC_TUNABLES", "")


def keep_freed_heap_memory():
    if is_set() or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES"), TUNABLES) if t)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
