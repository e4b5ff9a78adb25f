"""How the training process ends, for a hook left open: a normal end closes it
with end of training; an uncaught exception or SIGTERM closes it without."""

import logging
import signal
import sys
import threading
from typing import Any, Optional

logger = logging.getLogger("tensorkeep.pytorch")

# How the process ends decides how an unclosed hook closes at exit: a normal
# end is the end of training; an uncaught exception or SIGTERM is not (the
# worker's stream ends without end of training, so the collector makes it
# LOST after its --worker-timeout unless it comes back).
_uncaught_exception = False
_terminated_by: Optional[int] = None
_previous_excepthook: Any = None
TERM_EXIT_CLOSE_SECONDS = 10.0


def _note_uncaught(exc_type: Any, exc: Any, tb: Any) -> None:
    global _uncaught_exception
    _uncaught_exception = True
    (_previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (what torchrun and schedulers send): ends the main thread with
    SystemExit(128 + signum), so ``finally`` blocks run and the exit handler
    sends what the hook queued and closes without end of training. A second
    SIGTERM kills the process at once. As for every Python signal handler, it
    runs in the main thread when that thread next runs Python code: a main
    thread blocked in one long C call (one time.sleep(60)) is not interrupted
    when the kernel delivered the signal to another thread (gRPC's)."""
    global _terminated_by
    _terminated_by = signum
    signal.signal(signum, signal.SIG_DFL)
    logger.warning("tensorkeep: SIGTERM: closing the hook without end of training, then exiting")
    raise SystemExit(128 + signum)


def install_exit_handlers() -> None:
    """Once per process: note an uncaught exception (sys.excepthook, chained),
    and turn SIGTERM into SystemExit when nothing else handles it."""
    global _previous_excepthook
    if _previous_excepthook is None:
        _previous_excepthook = sys.excepthook
        sys.excepthook = _note_uncaught
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # pragma: no cover - not the main interpreter
            pass


def ended_normally() -> bool:
    """False after an uncaught exception in the main thread or a SIGTERM."""
    if _uncaught_exception or _terminated_by is not None:
        return False
    # Set by the interpreter when the main script ends with an uncaught
    # exception (even if another sys.excepthook replaced ours).
    return getattr(sys, "last_value", None) is None


def terminated_by() -> Optional[int]:
    """The signal that ends the process (SIGTERM), or None."""
    return _terminated_by
