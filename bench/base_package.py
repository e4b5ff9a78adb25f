"""The Python client as it was at another commit, importable beside the
current one, so that a bench can measure a change against the code before it
in the same run (bench/agent_bench.py ``--base REV``).

    base = base_package.load("HEAD~1", work_dir)   # the package tensorkeep_base

The package at REV (``git archive`` of client/python/tensorkeep) is copied
into ``work_dir`` as ``tensorkeep_base``, its absolute imports of
``tensorkeep`` renamed. Its generated protobuf modules are not built again:
protobuf refuses to register one .proto file twice in a process, so
``tensorkeep_base`` imports the current package's (the wire contract is the
same; a change of the .proto files cannot be compared this way).
"""

import importlib
import io
import os
import re
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "tensorkeep_base"
_SRC = "client/python/tensorkeep"
_IMPORT = re.compile(r"^(\s*)(from|import) tensorkeep(?=[. ]|$)", re.M)
_PROTO = re.compile(r"^(\s*)from \._proto import", re.M)


def load(rev: str, work_dir: str):
    """Imports the client at ``rev`` as ``tensorkeep_base``; returns the
    module. SystemExit naming the revision when git cannot give it."""
    out = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", rev, _SRC], capture_output=True)
    if out.returncode != 0:
        raise SystemExit(f"--base {rev}: git archive failed: {out.stderr.decode().strip()}")
    dest = os.path.join(work_dir, "base-package")
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        for m in tar.getmembers():
            if not m.isfile() or not m.name.endswith(".py") or "/_proto/" in m.name:
                continue
            rel = os.path.relpath(m.name, _SRC)
            path = os.path.join(dest, NAME, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            text = tar.extractfile(m).read().decode()
            text = _IMPORT.sub(rf"\1\2 {NAME}", text)
            text = _PROTO.sub(r"\1from tensorkeep._proto import", text).replace(f"{NAME}._proto", "tensorkeep._proto")
            with open(path, "w") as f:
                f.write(text)
    sys.path.insert(0, dest)
    return importlib.import_module(NAME)
