"""Keep the memory a training step or a weight update frees inside the process, for the next to reuse.

glibc's malloc serves every request above its mmap threshold (32 MB at most) with a fresh
mapping and unmaps it on free, and hands the top of its heap back to the kernel once more than
its trim threshold lies free there. A training step allocates its activations, logits and
gradients and frees them at its end, so every step the kernel maps, zero-fills and faults in the
same pages again. Seen on the 28M-parameter model of benchmarks/vs_trl_representative.py: the
trainer's resident memory grew by about 2 GB over its first two steps and rose and fell by
hundreds of MB in every step after, and in the first steps up to 70% of its CPU time was the
kernel's (psutil, user vs system time). With mmap and trimming off,
freed blocks stay in the heap and the next step's allocations reuse them; the process keeps
its peak memory, as jemalloc or tcmalloc would.

A CPU rollout worker frees and allocates the same way on every weight update: its engine
rebuilds each linear layer's packed oneDNN weight (rlsvc/rollout/vllm_engine.py), hundreds of MB
on that model, so the trainer ranks, the reference and the rollout workers all apply it
(`trainer.keep_freed_memory`, `rollout.keep_freed_memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # the largest int mallopt takes: the heap's top is trimmed only once 2 GB lie free there


def keep_freed_memory() -> bool:
    """Tell this process's malloc to keep what is freed (no mmap for large blocks, no trimming).
    True when applied; False where the C library has no `mallopt` (not glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
