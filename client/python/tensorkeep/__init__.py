"""tensorkeep: a collector of neural-network tensors with smdebug's API.

Writing::

    from tensorkeep import Writer, modes
    w = Writer("tensorkeep://127.0.0.1:PORT/my-trial", worker="worker_0", num_workers=1)

Analysis::

    from tensorkeep.trials import create_trial
    trial = create_trial("tensorkeep://127.0.0.1:PORT/my-trial")

The top-level names are smdebug's (``from smdebug import modes, SaveConfig,
SaveConfigMode, ReductionConfig``), so ``sed s/smdebug/tensorkeep/`` ports a
script. See docs/python.md.
"""

from . import exceptions
from ._credentials import set_credentials
from .core.collection import CollectionKeys
from .core.reduction_config import ReductionConfig
from .core.save_config import SaveConfig, SaveConfigMode
from .exceptions import TensorkeepError
from .modes import ModeKeys
from .writer import Writer

# smdebug spells it `from smdebug import modes; modes.TRAIN`: modes *is* ModeKeys.
modes = ModeKeys

__version__ = "0.1.0"

__all__ = [
    "CollectionKeys",
    "ModeKeys",
    "ReductionConfig",
    "SaveConfig",
    "SaveConfigMode",
    "TensorkeepError",
    "Writer",
    "__version__",
    "exceptions",
    "modes",
    "set_credentials",
]
