"""glibc's heap thresholds, pinned where its own heuristic ends (issue 16).

Both ends of the client allocate and free blocks large enough for glibc's
dynamic thresholds to hand memory back to the kernel and fault it in again,
page by page (~5-10 us a fault on a VM):

* the PyTorch hook's training process: PyTorch's CPU tensors come from
  ``malloc``. glibc serves a block from the heap once its dynamic mmap
  threshold has risen past the block's size (the first free of a larger
  mmapped block raises it, up to 32 MiB), and gives the heap's top back to
  the kernel whenever a free leaves more than twice that threshold unused
  there. A training step's temporaries (the MLP's gradient and its product,
  784 KiB each) freed at the top of the heap then cross that line in some
  steps and not in others, depending on which other small blocks sit above
  them: the step after a trim takes the same 1.5 MiB back (384 page faults).
  The hook's own allocations shift that balance: the MLP with no hook paid
  2.5-121 faults a step from run to run, with the hook's dry run 23-117,
  handing over to the agent 51-85 (~0.4-1.1 ms a step);
* a Trial reading values: each message of a ``values()`` stream (up to ~1 MB
  of packed values) is a fresh block, and reading 40 MB faulted in
  8,700-15,000 pages (about one a page read), 0.26-0.41 s against
  0.15-0.19 s pinned (bench/python_bench.py's read, 2026-11-29).

``pin()`` sets the two thresholds to where glibc's heuristic ends for a
process that has freed a 32 MiB block (mmap 32 MiB, trim 64 MiB), once per
process, when the first Hook or Trial is made: then no step pays faults for
the heap's top (0-0.2 a step in the same loops), and reading 40 MB faults
250-2,000 pages. The cost: up to 64 MiB of freed heap stays with the
process. Nothing is changed when the process chose its allocator's settings
itself (``MALLOC_*_`` variables, ``GLIBC_TUNABLES`` with ``glibc.malloc.``,
an allocator in ``LD_PRELOAD``), off glibc, or with
``TENSORKEEP_MALLOC_THRESHOLDS=0``.

``reserve(n)``, once the thresholds are pinned: a Trial about to allocate
``n`` bytes of values the caller keeps (a packed message of a ``values()``
stream, a large value) first grows the heap by a 16 MiB block in
transparent huge pages, then frees it, so that the values are carved out of
memory faulted in 2 MiB at a time. Values are kept, so they are fresh memory:
reading 40 MB of 4 KB values faulted in ~10,600 pages, ~13 us each on this
VM (0.15-0.22 s); in huge pages, ~2,500 faults and 0.04-0.06 s. What glibc's
``glibc.malloc.hugetlb=1`` tunable does for every allocation, which a
process can only set in its environment at its start. The values stay each
in its own block of ``malloc`` (nothing holds memory beyond what it keeps);
the cost is at most one 16 MiB block faulted in and not yet used, which
stays in the heap for later allocations. With the kernel's THP ``defrag``
at ``madvise`` (its default), a fault in such a block may compact memory
first: on a host whose memory is fragmented, that can take longer than the
faults it saves.
"""

import ctypes
import logging
import os
import platform
import threading

logger = logging.getLogger("tensorkeep")

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what its heuristic sets beside it
ENV = "TENSORKEEP_MALLOC_THRESHOLDS"
_USER_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_")
_ALLOCATORS = ("malloc", "jemalloc", "tcmalloc", "mimalloc", "hoard")

HUGE_PAGE = 2 << 20  # x86-64's and arm64's (4 KiB pages) transparent huge page
RESERVE_BYTES = 16 << 20  # a block reserve() grows the heap by: below the mmap and trim thresholds
_MADV_HUGEPAGE = 14  # linux/mman.h

_lock = threading.Lock()
_result = ""
_libc = None  # set by _pin when it pinned the thresholds: reserve() acts only then
_headroom = 0  # bytes of the last reserved block not yet claimed by reserve()


def pin() -> str:
    """Pins the thresholds (see the module's text) unless the process chose
    its own; returns what it did, or why not. Only the first call acts."""
    global _result
    with _lock:
        if not _result:
            _result = _pin()
            logger.info("tensorkeep: glibc heap thresholds: %s", _result)
        return _result


def _pin() -> str:
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"left to glibc's heuristic ({ENV}=0)"
    if platform.libc_ver()[0] != "glibc":
        return "left alone: not glibc"
    chosen = [v for v in _USER_VARS if v in os.environ]
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        chosen.append("GLIBC_TUNABLES")
    preload = os.environ.get("LD_PRELOAD", "").lower()
    if any(a in preload for a in _ALLOCATORS):
        chosen.append("LD_PRELOAD")
    if chosen:
        return "left alone: the process set " + ", ".join(chosen)
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError) as e:
        return f"left alone: no mallopt ({e})"
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # The mmap threshold first: setting either ends glibc's heuristic, and
    # alone the trim threshold would leave every block over 128 KiB mmapped.
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        return "left alone: mallopt refused"
    _set_up_reserve()
    return f"pinned (mmap {MMAP_THRESHOLD >> 20} MiB, trim {TRIM_THRESHOLD >> 20} MiB)"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _set_up_reserve() -> None:
    """Looks up what reserve() calls; leaves reserve() off where any is missing
    (a glibc before 2.33 has no mallinfo2) or huge pages are off."""
    global _libc
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return
        libc = ctypes.CDLL(None, use_errno=True)
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = (ctypes.c_size_t,)
        libc.free.argtypes = (ctypes.c_void_p,)
        libc.free.restype = None
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        libc.madvise.restype = ctypes.c_int
        libc.mallinfo2.restype = _Mallinfo2
        libc.mallinfo2.argtypes = ()
    except (OSError, AttributeError):
        return
    _libc = libc


def reserve(nbytes: int) -> None:
    """The caller is about to allocate ``nbytes`` it keeps (see the module's
    text): when the last reserved block is used up, grows the heap by a new
    one in huge pages. Does nothing unless pin() pinned the thresholds."""
    global _headroom
    libc = _libc
    if libc is None or nbytes <= 0:
        return
    with _lock:
        _headroom -= nbytes
        if _headroom >= 0:
            return
        size = max(RESERVE_BYTES, nbytes + HUGE_PAGE)
        # Counted as reserved even when nothing is done below: the next
        # attempt comes a block later, not at every message.
        _headroom = size - nbytes
        if size + HUGE_PAGE >= MMAP_THRESHOLD:
            return  # malloc would map it apart from the heap
        # A heap whose top already holds this much free is left as it is:
        # freeing the block there would give the whole top, but glibc's top
        # pad, back to the kernel (the trim threshold), faulted pages included.
        if libc.mallinfo2().keepcost + size + 2 * HUGE_PAGE >= TRIM_THRESHOLD:
            return
        p = libc.malloc(size + HUGE_PAGE)
        if not p:
            return
        try:
            # The block's whole huge pages only (the memory around it is not
            # ours to advise); the partial one at its end is in the next block.
            start = (p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
            end = (p + size + HUGE_PAGE) & ~(HUGE_PAGE - 1)
            libc.madvise(start, end - start, _MADV_HUGEPAGE)  # a hint: refused, pages are 4 KiB
            ctypes.memset(p, 0, end - p)
        finally:
            libc.free(p)
