"""The hook and a Trial pin glibc's heap thresholds (tensorkeep/_malloc.py):
a step's temporaries, or the messages of a values() stream, freed at the
top of the heap are no longer handed back to the kernel and faulted in again
page by page, unless the process chose its allocator's settings itself.

Each case runs in a fresh interpreter (the thresholds are the process's):
it creates a dry-run Hook or a Trial (MAKE), then allocates, touches and frees two 784 KiB
blocks 50 times -- the MLP's gradient-sized temporaries -- and counts the
page faults (getrusage), which glibc's own heuristic makes ~360 a cycle."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest


PROBE = textwrap.dedent(
    """
    import ctypes, resource, sys
    from tensorkeep import _malloc

    if sys.argv[1] == "hook":
        import tensorkeep.pytorch as tkp

        tkp.Hook(dry_run=True)
    else:  # a Trial connects on its first query: none is made here
        from tensorkeep.trials import create_trial

        create_trial("tensorkeep://127.0.0.1:1/t")
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    N = 784 << 10

    def cycle():
        a = libc.malloc(N); libc.memset(a, 1, N)
        b = libc.malloc(N); libc.memset(b, 1, N)
        libc.free(b); libc.free(a)

    for _ in range(5):  # glibc's heuristic settles
        cycle()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        cycle()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(_malloc.pin())
    """
)

CYCLES = 50
PAGES = 2 * (784 << 10) // 4096  # re-faulted by a cycle that trims


def _probe(make="hook", **env):
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    clean.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE, make], capture_output=True, text=True, timeout=120, env=clean)
    assert out.returncode == 0, out.stderr[-2000:]
    faults, said = out.stdout.strip().splitlines()[-2:]
    return int(faults), said


@pytest.fixture(scope="module")
def heuristic_faults():
    """The faults with glibc's own heuristic (the hook told to leave it)."""
    if platform.libc_ver()[0] != "glibc":
        pytest.skip(f"not glibc ({platform.libc_ver()}): the hook leaves the allocator alone")
    faults, said = _probe("trial", TENSORKEEP_MALLOC_THRESHOLDS="0")
    assert said == "left to glibc's heuristic (TENSORKEEP_MALLOC_THRESHOLDS=0)"
    if faults < CYCLES * PAGES // 2:
        pytest.skip(f"this glibc did not trim the heap's top here ({faults} faults in {CYCLES} cycles): "
                    "nothing for the pinned thresholds to show")
    return faults


@pytest.fixture(params=["hook", "trial"])
def make(request):
    if request.param == "hook":
        pytest.importorskip("torch")
    return request.param


def test_pinned_thresholds_keep_the_heap_top(heuristic_faults, make):
    faults, said = _probe(make)
    assert said == "pinned (mmap 32 MiB, trim 64 MiB)"
    # ~0 against ~360 a cycle: the freed top stays with the process.
    assert faults < CYCLES * 4, (faults, heuristic_faults)


@pytest.mark.parametrize("env", [
    {"MALLOC_TOP_PAD_": "131072"},
    {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"},
])
def test_a_process_that_chose_its_allocator_settings_is_left_alone(heuristic_faults, make, env):
    """Its own settings rule: glibc's trim every cycle, as they make it."""
    faults, said = _probe(make, **env)
    name = next(iter(env))
    assert said == f"left alone: the process set {name}"
    assert faults >= CYCLES * PAGES // 2, faults


KEEP = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from tensorkeep import _dtypes, _malloc
    from tensorkeep.trials import create_trial

    create_trial("tensorkeep://127.0.0.1:1/t")  # pins the thresholds, as any Trial does
    if sys.argv[1] == "off":
        _malloc._libc = None  # reserve() does nothing
    values = np.arange(40 * 256 * 1024, dtype=np.float32).reshape(40, 256, 1024)
    packed = [v.tobytes() for v in values]  # 40 messages of 256 values of 4 KB, as a values() stream
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    kept = []
    for data in packed:
        _malloc.reserve(len(data))  # what Tensor._decode does before splitting a message
        kept += _dtypes.split_wire(_dtypes.NATIVE_CODES[np.dtype(np.float32)], (1024,), data, 256)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    with open("/proc/self/smaps_rollup") as f:
        huge = [int(l.split()[1]) for l in f if l.startswith("AnonHugePages:")]
    print(huge[0] if huge else -1)  # KiB of anonymous huge pages the process holds
    assert all(a.flags.owndata and a.flags.writeable for a in kept)
    assert all(np.array_equal(a, values[i // 256, i % 256]) for i, a in enumerate(kept))
    """
)


def _keep(mode):
    """(page faults while keeping the values, KiB of huge pages held after)."""
    out = subprocess.run([sys.executable, "-c", KEEP, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    faults, huge = out.stdout.strip().splitlines()[-2:]
    return int(faults), int(huge)


def test_values_kept_from_a_read_come_from_huge_pages():
    """40 MB of 4 KB values, each its own block: with reserve(), the heap
    grows in 2 MiB huge pages, a fault each, instead of a fault a 4 KiB page."""
    if platform.libc_ver()[0] != "glibc":
        pytest.skip(f"not glibc ({platform.libc_ver()}): nothing is reserved")
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read()
    except OSError as e:
        pytest.skip(f"no transparent huge pages here ({e})")
    if "[never]" in thp:
        pytest.skip(f"transparent huge pages are off here ({thp.strip()})")
    pages = 40 * 256 * 4096 // 4096
    off, huge_off = _keep("off")
    assert off >= pages * 3 // 4, f"{off} faults for {pages} pages kept without reserve(): nothing to show"
    on, huge = _keep("on")
    # (numpy's own 40 MB array is in huge pages either way: numpy advises them for large arrays.)
    if huge <= huge_off:
        pytest.skip(f"the kernel gave reserve() no huge page ({on} faults against {off}): its memory is "
                    "fragmented, or a container's settings forbid them")
    # ~1,500-2,900 here (the blocks' first partial huge page, the arrays' headers), against ~10,300.
    assert on < off // 3, (on, off, huge)
