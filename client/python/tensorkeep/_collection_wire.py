"""Collections on the wire: a hook's ``Collection`` as the ``CollectionConfig``
PutCollections stores, and back (docs/python.md, "Collections")."""

from __future__ import annotations

import logging
from typing import Any, Iterable, List, Optional

from ._proto import tensorkeep_pb2 as pb
from .core.collection import Collection
from .core.reduction_config import ReductionConfig
from .core.save_config import SaveConfig, SaveConfigMode

logger = logging.getLogger("tensorkeep")

# Seconds the hook waits for PutCollections (it never stops training for it).
PUT_TIMEOUT_SECONDS = 10.0


def to_proto(c: Collection) -> Any:
    """The ``CollectionConfig`` of ``c``: its regexes, names, configs."""
    out = pb.CollectionConfig(
        name=c.name,
        include_regex=list(c.include_regex),
        tensor_names=sorted(c.tensor_names),
        save_histogram=bool(c.save_histogram),
    )
    if c.save_config is not None:
        for mode, scm in sorted(c.save_config.mode_save_configs.items()):
            if scm is None:
                continue
            s = out.save_configs.add(
                mode=int(mode),
                save_interval=int(scm.save_interval),
                start_step=max(0, int(scm.start_step)),
                save_steps=sorted({int(x) for x in scm.save_steps if int(x) >= 0}),
            )
            if scm.end_step is not None:
                s.has_end_step = True
                s.end_step = max(0, int(scm.end_step))
    rc = c.reduction_config
    if rc is not None:
        out.reduction_config.CopyFrom(
            pb.ReductionConfig(
                reductions=list(rc.reductions),
                abs_reductions=list(rc.abs_reductions),
                norms=list(rc.norms),
                abs_norms=list(rc.abs_norms),
                save_raw_tensor=bool(rc.save_raw_tensor),
                save_shape=bool(rc.save_shape),
            )
        )
    return out


def save_config_of(cfg: Any) -> Optional[SaveConfig]:
    """The ``SaveConfig`` a stored ``CollectionConfig`` describes (None: none sent)."""
    if not cfg.save_configs:
        return None
    modes = {}
    for s in cfg.save_configs:
        modes[int(s.mode)] = SaveConfigMode(
            save_interval=int(s.save_interval),
            start_step=int(s.start_step),
            end_step=int(s.end_step) if s.has_end_step else None,
            save_steps=[int(x) for x in s.save_steps],
        )
    return SaveConfig(mode_save_configs=modes)


def reduction_config_of(cfg: Any) -> Optional[ReductionConfig]:
    if not cfg.HasField("reduction_config"):
        return None
    r = cfg.reduction_config
    return ReductionConfig(
        reductions=list(r.reductions),
        abs_reductions=list(r.abs_reductions),
        norms=list(r.norms),
        abs_norms=list(r.abs_norms),
        save_raw_tensor=bool(r.save_raw_tensor),
        save_shape=bool(r.save_shape),
    )


def add_regexes(c: Collection, regexes: Iterable[str]) -> None:
    """Adds to ``c`` the regexes it lacks; one Python's ``re`` refuses is kept in
    ``include_regex`` but matches nothing (with a warning)."""
    for r in regexes:
        if r in c.include_regex:
            continue
        try:
            c.include(r)
        except Exception as e:  # noqa: BLE001 - stored by another client's rules
            logger.warning("tensorkeep: collection %r: include_regex %r: %s", c.name, r, e)
            c.include_regex.append(r)


def put_collections(out_dir: str, worker: str, collections: List[Collection]) -> bool:
    """Stores ``collections`` as ``worker``'s configuration on the collector of
    ``out_dir``; False (with a warning) when it could not."""
    from . import _address, _channel

    addr = _address.parse(out_dir, write=True)
    req = pb.PutCollectionsRequest(
        trial=addr.trial, worker=worker, collections=[to_proto(c) for c in collections]
    )
    channel = _channel.open_channel(addr.target)
    try:
        _channel.pb_grpc.TensorKeepStub(channel).PutCollections(req, timeout=PUT_TIMEOUT_SECONDS)
        return True
    except Exception as e:  # noqa: BLE001 - the training goes on without it
        details = e.details() if hasattr(e, "details") else str(e)
        logger.warning(
            "tensorkeep: could not store the collections of trial %r on %s: %s",
            addr.trial, addr.target, details,
        )
        return False
    finally:
        channel.close()
