"""The bench scripts' writers hand over to a tensorkeep-agent of their own.

Imported (for its effect) by every bench script that writes: unless
$TENSORKEEP_AGENT_SOCKET is set, this process and its children get an agent
on a socket in a temporary directory (started by the first Writer, gone 2 s
after the last), so that a bench never measures, nor shares, an agent another
build or another run started on the user's default socket.
"""

import atexit
import os
import shutil
import tempfile

if not os.environ.get("TENSORKEEP_AGENT_SOCKET"):
    _dir = tempfile.mkdtemp(prefix="tk-bench-agent-")
    atexit.register(shutil.rmtree, _dir, True)
    os.environ["TENSORKEEP_AGENT_SOCKET"] = os.path.join(_dir, "agent.sock")
    os.environ.setdefault("TENSORKEEP_AGENT_IDLE_EXIT_SECONDS", "2")
