"""smdebug's PyTorch API (``smdebug.pytorch``) over tensorkeep.

A training script written for smdebug ports by changing its import::

    import tensorkeep.pytorch as smd          # was: import smdebug.pytorch as smd
    hook = smd.Hook(out_dir="tensorkeep://127.0.0.1:7000/my-trial",
                    save_config=smd.SaveConfig(save_interval=100),
                    include_collections=["weights", "gradients", "losses"])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    hook.set_mode(smd.modes.TRAIN)
    ...
    if hook.should_stop():
        ...
    hook.close()

``create_trial`` is ``tensorkeep.trials.create_trial`` (smdebug re-exports it here too).
"""

from tensorkeep import modes

from .collection import Collection, CollectionKeys, CollectionManager
from .hook import Hook, del_hook, get_hook, set_hook
from .reduction_config import ReductionConfig
from .save_config import SaveConfig, SaveConfigMode


def create_trial(*args, **kwargs):  # type: ignore[no-untyped-def]
    """``tensorkeep.trials.create_trial`` (smdebug exports it from ``smdebug.pytorch``)."""
    from tensorkeep.trials import create_trial as _create_trial

    return _create_trial(*args, **kwargs)


__all__ = [
    "Collection",
    "CollectionKeys",
    "CollectionManager",
    "Hook",
    "ReductionConfig",
    "SaveConfig",
    "SaveConfigMode",
    "create_trial",
    "del_hook",
    "get_hook",
    "modes",
    "set_hook",
]
