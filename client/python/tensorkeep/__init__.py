"""tensorkeep: a collector of neural-network tensors with smdebug's API.

Writing::

    from tensorkeep import Writer, modes
    w = Writer("tensorkeep://127.0.0.1:PORT/my-trial", worker="worker_0", num_workers=1)

Analysis::

    from tensorkeep.trials import create_trial
    trial = create_trial("tensorkeep://127.0.0.1:PORT/my-trial")

See docs/python.md.
"""

from . import exceptions
from .exceptions import TensorkeepError
from .modes import ModeKeys
from .writer import Writer

# smdebug spells it `from smdebug import modes; modes.TRAIN`: modes *is* ModeKeys.
modes = ModeKeys

__version__ = "0.1.0"

__all__ = ["Writer", "modes", "ModeKeys", "TensorkeepError", "exceptions", "__version__"]
