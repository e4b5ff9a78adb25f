"""Parses the ``out_dir``/``path`` of a trial into a collector address and a trial name.

Accepted forms:

- ``tensorkeep://HOST:PORT/TRIAL`` (HOST may be a name, an IPv4 address or a
  bracketed IPv6 address such as ``[::1]``);
- ``tensorkeep:///TRIAL`` or a bare ``TRIAL``: the collector is taken from the
  environment variable ``TENSORKEEP_SERVER`` (``HOST:PORT``).
"""

import os
import re
from dataclasses import dataclass
from typing import Optional

from ._names import check_trial

SCHEME = "tensorkeep://"
SERVER_ENV = "TENSORKEEP_SERVER"

_HOSTPORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")


@dataclass(frozen=True)
class Address:
    """Where a trial lives: ``target`` is the collector's ``HOST:PORT``."""

    target: str
    trial: str

    @property
    def url(self) -> str:
        """The trial's canonical ``tensorkeep://HOST:PORT/TRIAL`` form."""
        return f"{SCHEME}{self.target}/{self.trial}"


def check_target(target: str, what: str = "collector address") -> str:
    """Returns ``target`` if it has the form ``HOST:PORT``; raises ValueError otherwise."""
    m = _HOSTPORT.fullmatch(target)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ValueError(f"invalid {what} {target!r}: expected HOST:PORT")
    return target


def _server_from_env() -> str:
    value = os.environ.get(SERVER_ENV, "").strip()
    if not value:
        raise ValueError(
            f"no collector given: use tensorkeep://HOST:PORT/TRIAL or set {SERVER_ENV}=HOST:PORT"
        )
    if value.startswith(SCHEME):
        value = value[len(SCHEME):].rstrip("/")
    return check_target(value, f"{SERVER_ENV}")


def parse(path: str, server: Optional[str] = None) -> Address:
    """Returns the Address named by ``path``.

    ``server`` (``HOST:PORT``), when given, is used for a bare trial name instead
    of ``TENSORKEEP_SERVER``. Raises ValueError for a malformed path or trial
    name, TypeError when ``path`` is not a str.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {type(path).__name__}")
    if path.startswith(SCHEME):
        rest = path[len(SCHEME):]
        host, sep, trial = rest.partition("/")
        if not sep:
            raise ValueError(f"invalid path {path!r}: expected tensorkeep://HOST:PORT/TRIAL")
        trial = trial.rstrip("/")
        target = check_target(host) if host else (server and check_target(server)) or _server_from_env()
        return Address(target, check_trial(trial))
    if "://" in path:
        raise ValueError(
            f"unsupported path {path!r}: tensorkeep reads and writes tensorkeep://HOST:PORT/TRIAL"
        )
    target = check_target(server) if server else _server_from_env()
    return Address(target, check_trial(path))
