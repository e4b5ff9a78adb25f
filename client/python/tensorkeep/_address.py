"""Parses the ``out_dir``/``path`` of a trial into a collector address and a trial name.

Accepted forms:

- ``tensorkeep://HOST:PORT/TRIAL`` (HOST may be a name, an IPv4 address or a
  bracketed IPv6 address such as ``[::1]``);
- ``tensorkeep://HOST:PORT,HOST:PORT,.../TRIAL``: a cluster's collectors; the
  trial is on the one that holds it, else its owner (_cluster.locate; this
  asks the collectors, docs/scaling-out.md);
- ``tensorkeep:///TRIAL`` or a bare ``TRIAL``: the collectors are taken from
  the environment variable ``TENSORKEEP_SERVERS`` (``HOST:PORT,...``), else
  ``TENSORKEEP_SERVER`` (``HOST:PORT``).
"""

import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ._names import check_trial

SCHEME = "tensorkeep://"
SERVER_ENV = "TENSORKEEP_SERVER"
SERVERS_ENV = "TENSORKEEP_SERVERS"

_HOSTPORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")


@dataclass(frozen=True)
class Address:
    """Where a trial lives: ``target`` is the collector's ``HOST:PORT``;
    ``servers`` the cluster's collectors it was chosen from (or just ``target``)."""

    target: str
    trial: str
    servers: Tuple[str, ...] = ()

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


def check_targets(text: str, what: str = "collector address") -> List[str]:
    """``HOST:PORT,HOST:PORT,...`` as a list; ValueError for an empty item, one
    that is not HOST:PORT, or one listed twice (as base/collector_list.h)."""
    out: List[str] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"{what} {text!r} has an empty item: expected HOST:PORT,HOST:PORT,...")
        check_target(item, what)
        if item in out:
            raise ValueError(f"{what} lists {item!r} twice: each collector once")
        out.append(item)
    return out


def servers_from_env() -> List[str]:
    """The collectors of ``TENSORKEEP_SERVERS``, else ``TENSORKEEP_SERVER``."""
    for env in (SERVERS_ENV, SERVER_ENV):
        value = os.environ.get(env, "").strip()
        if value.startswith(SCHEME):
            value = value[len(SCHEME):].rstrip("/")
        if value:
            return check_targets(value, env)
    raise ValueError(
        f"no collector given: use tensorkeep://HOST:PORT/TRIAL or set {SERVERS_ENV}=HOST:PORT,... "
        f"(or {SERVER_ENV}=HOST:PORT)"
    )


def resolve_servers(server: Optional[str] = None) -> List[str]:
    """``server`` (``HOST:PORT`` or a comma list) if given, else the environment's."""
    return check_targets(server) if server else servers_from_env()


def _locate(servers: List[str], trial: str, write: bool) -> Address:
    if len(servers) == 1:
        return Address(servers[0], trial, tuple(servers))
    from . import _cluster  # needs grpc; single collectors do without

    return Address(_cluster.locate(servers, trial, write=write), trial, tuple(servers))


def parse(path: str, server: Optional[str] = None, write: bool = False) -> Address:
    """Returns the Address named by ``path``.

    ``server`` (``HOST:PORT`` or ``HOST:PORT,HOST:PORT,...``), when given, is
    used for a bare trial name instead of the environment. With several
    collectors the trial's collector is found by asking them (``write``: a
    trial found nowhere goes to its owner even if some collector did not
    answer). Raises ValueError for a malformed path or trial name, TypeError
    when ``path`` is not a str, CollectorUnavailable when the trial cannot be
    located for reading.
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
        trial = check_trial(trial.rstrip("/"))
        servers = check_targets(host) if host else resolve_servers(server)
        return _locate(servers, trial, write)
    if "://" in path:
        raise ValueError(
            f"unsupported path {path!r}: tensorkeep reads and writes tensorkeep://HOST:PORT/TRIAL"
        )
    return _locate(resolve_servers(server), check_trial(path), write)
