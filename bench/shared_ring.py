"""The ``shared floor`` of bench/agent_bench.py: the saved tensors copied into
a ring in shared memory that another process, on the other CPU, copies out.

The floor (a copy into buffers of the training process's own) is not what a
hand-over to another process can cost: the other process reads the ring, so
the lines the training thread writes next are not in its cache any more, and
a ring the size of the agent's (32 MiB) walks through more pages than the
TLB holds. This measures that copy with no protocol around it: no messages,
no system calls on the training thread (the producer publishes how far it
wrote in the ring's header; the reader polls it), the same memcpy the
hand-over does (``mmap`` slice assignment), the same ring size.

    SharedRing(ring_bytes, cpu)   # starts the reader (this file run as a script)
    ring.put(arrays)              # one step's copy; waits for room if the reader is behind
    ring.drain(timeout)           # until the reader has taken everything
    ring.taken()                  # the reader's copy of the last put (after drain)
    ring.close()

Header: the producer's head at offset 0, the reader's consumed position at
64 and a stop flag at 128 (u64 each, on lines of their own).
"""

import mmap
import os
import struct
import subprocess
import sys
import time
from typing import Optional, Sequence

_Q = struct.Struct("<Q")
HEADER = 4096
_HEAD, _CONSUMED, _STOP = 0, 64, 128
_ROOM_PAUSE_S = 50e-6
_READER_PAUSE_S = 100e-6


class SharedRing:
    def __init__(self, ring_bytes: int, cpu: Optional[int]) -> None:
        self.ring = ring_bytes
        self.pos = 0
        self.last = (0, 0)  # ring offset and size of the last put
        self._fd = os.memfd_create("tk-shared-floor")
        self._out_fd = os.memfd_create("tk-shared-floor-out")
        os.ftruncate(self._fd, HEADER + ring_bytes)
        os.ftruncate(self._out_fd, ring_bytes)
        self.mm = mmap.mmap(self._fd, HEADER + ring_bytes)
        self._out = mmap.mmap(self._out_fd, ring_bytes)
        args = [sys.executable, os.path.abspath(__file__), str(self._fd), str(self._out_fd), str(ring_bytes),
                "" if cpu is None else str(cpu)]
        self.reader = subprocess.Popen(args, pass_fds=(self._fd, self._out_fd), stdin=subprocess.DEVNULL)

    def put(self, arrays: Sequence) -> None:
        """Copies ``arrays`` (contiguous numpy arrays) into the ring, one after
        another, then publishes them; a step never wraps."""
        total = sum(a.nbytes for a in arrays)
        ring, mm = self.ring, self.mm
        if total > ring:
            raise ValueError(f"a step of {total} bytes does not fit the {ring}-byte ring")
        pos = self.pos
        off = pos % ring
        if off + total > ring:
            pos += ring - off
            off = 0
        need = pos + total - ring
        deadline = None
        while _Q.unpack_from(mm, _CONSUMED)[0] < need:
            if self.reader.poll() is not None:
                raise RuntimeError(f"the shared floor's reader exited ({self.reader.returncode})")
            deadline = deadline or time.monotonic() + 10
            if time.monotonic() > deadline:
                raise RuntimeError("the shared floor's reader took nothing for 10 s")
            time.sleep(_ROOM_PAUSE_S)
        start = HEADER + off
        for a in arrays:
            n = a.nbytes
            mm[start : start + n] = a
            start += n
        self.pos = pos + total
        self.last = (off, total)
        _Q.pack_into(mm, _HEAD, self.pos)

    def drain(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while _Q.unpack_from(self.mm, _CONSUMED)[0] < self.pos:
            if self.reader.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the shared floor's reader did not take what was put")
            time.sleep(1e-3)

    def taken(self) -> bytes:
        """What the reader copied out of the last put (after drain)."""
        off, n = self.last
        return bytes(self._out[off : off + n])

    def close(self) -> None:
        _Q.pack_into(self.mm, _STOP, 1)
        try:
            self.reader.wait(10)
        except subprocess.TimeoutExpired:
            self.reader.kill()
            self.reader.wait()
        self.mm.close()
        self._out.close()
        os.close(self._fd)
        os.close(self._out_fd)


def _reader(fd: int, out_fd: int, ring: int, cpu: str) -> None:
    """Copies each newly published range of the ring out (to the same offsets
    of its own buffer, as the agent copies into its writer's queue), then
    publishes how far it took; polls the head every 100 us when idle."""
    if cpu:
        os.sched_setaffinity(0, {int(cpu)})
    mm = mmap.mmap(fd, HEADER + ring)
    out = mmap.mmap(out_fd, ring)
    view = memoryview(mm)
    consumed = 0
    parent = os.getppid()
    while not _Q.unpack_from(mm, _STOP)[0]:
        head = _Q.unpack_from(mm, _HEAD)[0]
        if head == consumed:
            if os.getppid() != parent:
                return  # the bench is gone
            time.sleep(_READER_PAUSE_S)
            continue
        while consumed < head:
            off = consumed % ring
            n = min(head - consumed, ring - off)
            out[off : off + n] = view[HEADER + off : HEADER + off + n]
            consumed += n
        _Q.pack_into(mm, _CONSUMED, consumed)


if __name__ == "__main__":
    _reader(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
