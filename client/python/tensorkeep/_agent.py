"""Finding, and starting, the node's tensorkeep-agent.

The agent listens on a Unix socket in a directory only this user can enter:
``$TENSORKEEP_AGENT_SOCKET``, else ``$XDG_RUNTIME_DIR/tensorkeep/agent-v2.sock``,
else ``/tmp/tensorkeep-UID/agent-v2.sock`` (the agent's DefaultSocketPath). A
writer connects to it; when no agent listens, it starts one
(``tensorkeep-agent --daemonize``, which returns once the agent listens; two
processes starting it at once end up with the same agent) and connects again.

The binary: ``$TENSORKEEP_AGENT``, else the build tree's (``bin/`` beside the
``python/`` this package was copied into), else ``tensorkeep-agent`` next to
the ``tensorkeep-server`` on PATH, else ``tensorkeep-agent`` on PATH.
"""

import os
import shutil
import socket
import subprocess
from typing import Optional

from .exceptions import TensorkeepError

# The hand-over protocol (agent/handover.h kProtocolVersion). It names the
# default socket, so that a client never meets an agent that speaks another.
PROTOCOL_VERSION = 2
SOCKET_ENV = "TENSORKEEP_AGENT_SOCKET"
BINARY_ENV = "TENSORKEEP_AGENT"
IDLE_EXIT_ENV = "TENSORKEEP_AGENT_IDLE_EXIT_SECONDS"
LINGER_ENV = "TENSORKEEP_AGENT_LINGER_MS"
_START_TIMEOUT = 30.0


class AgentUnavailable(TensorkeepError):
    """No tensorkeep-agent could be reached or started."""


def socket_path() -> str:
    """The agent's socket for this user on this node."""
    path = os.environ.get(SOCKET_ENV)
    if path:
        return path
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "tensorkeep", f"agent-v{PROTOCOL_VERSION}.sock")
    return f"/tmp/tensorkeep-{os.getuid()}/agent-v{PROTOCOL_VERSION}.sock"


def binary() -> Optional[str]:
    """The tensorkeep-agent to start, or None when none is found."""
    path = os.environ.get(BINARY_ENV)
    if path:
        return path if os.access(path, os.X_OK) else None
    # A build tree: the package is copied to build/python, binaries are in build/bin.
    package = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(os.path.dirname(os.path.dirname(package)), "bin", "tensorkeep-agent")
    if os.access(built, os.X_OK):
        return built
    server = shutil.which("tensorkeep-server")
    if server:
        beside = os.path.join(os.path.dirname(os.path.realpath(server)), "tensorkeep-agent")
        if os.access(beside, os.X_OK):
            return beside
    return shutil.which("tensorkeep-agent")


def _connect(path: str) -> Optional[socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return s
    except (FileNotFoundError, ConnectionRefusedError):
        s.close()
        return None
    except OSError:
        s.close()
        raise


def start(path: str) -> None:
    """Starts an agent on ``path`` (returns once it listens, or once another
    one is found listening there)."""
    exe = binary()
    if exe is None:
        raise AgentUnavailable(
            f"no tensorkeep-agent listens on {path} and none was found to start: set "
            f"{BINARY_ENV} to its path, or put it on PATH (it is built and installed "
            "next to tensorkeep-server)"
        )
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    log_path = os.path.join(directory, "agent.log")
    args = [exe, "--daemonize", "--socket", path]
    idle = os.environ.get(IDLE_EXIT_ENV)
    if idle:
        args += ["--idle-exit-seconds", idle]
    linger = os.environ.get(LINGER_ENV)
    if linger:
        args += ["--linger-ms", linger]
    with open(log_path, "ab") as log:
        try:
            out = subprocess.run(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, timeout=_START_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise AgentUnavailable(f"starting {exe} failed: {e}") from None
    if out.returncode != 0:
        raise AgentUnavailable(
            f"{exe} could not listen on {path} (exit code {out.returncode}); see {log_path}"
        )


def connect() -> socket.socket:
    """A connection to the node's agent, started if none listens."""
    path = socket_path()
    s = _connect(path)
    if s is None:
        start(path)
        s = _connect(path)
        if s is None:
            raise AgentUnavailable(f"tensorkeep-agent was started but does not accept on {path}")
    return s
