"""Collections: named groups of tensors, each with its own save and reduction config.

The built-in PyTorch collections and their regexes are smdebug's:

============  ===============================  ==========================================
collection    include_regex                    holds
============  ===============================  ==========================================
weights       ``^(?!gradient).*weight``        parameters named like ``*weight``
biases        ``^(?!gradient).*bias``          parameters named like ``*bias``
gradients     ``^gradient``                    ``gradient/<parameter name>``
losses        ``[Ll]oss_(?!input).*output``    outputs of the registered loss module
default       the hook's ``include_regex``     whatever those regexes match
all           ``.*`` when ``save_all=True``    every tensor
============  ===============================  ==========================================

A tensor name matches a regex as Python's ``re.search`` does (smdebug's rule), so
``[Ll]oss_...`` finds ``CrossEntropyLoss_output_0``. Inputs and outputs of layers
are saved by adding a collection that matches them (``include_regex`` such as
``".*_output_"``, or ``Collection.add_module_tensors(module, inputs=True)``).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Pattern, Set, Tuple, Union

from . import config_changes
from .reduction_config import ReductionConfig
from .save_config import SaveConfig, SaveConfigMode

__all__ = ["Collection", "CollectionKeys", "CollectionManager", "DEFAULT_PYTORCH_COLLECTIONS"]


class CollectionKeys:
    DEFAULT = "default"
    ALL = "all"
    INPUTS = "inputs"
    OUTPUTS = "outputs"
    WEIGHTS = "weights"
    GRADIENTS = "gradients"
    LOSSES = "losses"
    BIASES = "biases"
    LAYERS = "layers"
    SM_METRICS = "sm_metrics"
    OPTIMIZER_VARIABLES = "optimizer_variables"
    TENSORFLOW_SUMMARIES = "tensorflow_summaries"
    METRICS = "metrics"
    # XGBoost's, kept so that every smdebug CollectionKeys name exists.
    HYPERPARAMETERS = "hyperparameters"
    PREDICTIONS = "predictions"
    LABELS = "labels"
    FEATURE_IMPORTANCE = "feature_importance"
    AVERAGE_SHAP = "average_shap"
    FULL_SHAP = "full_shap"
    TREES = "trees"


DEFAULT_PYTORCH_COLLECTIONS = (
    CollectionKeys.ALL,
    CollectionKeys.DEFAULT,
    CollectionKeys.WEIGHTS,
    CollectionKeys.BIASES,
    CollectionKeys.GRADIENTS,
    CollectionKeys.LOSSES,
)

# Collections of scalars: no reductions, always saved raw (smdebug's NON_REDUCTION_COLLECTIONS).
SCALAR_COLLECTIONS = frozenset(
    {CollectionKeys.LOSSES, CollectionKeys.METRICS, CollectionKeys.SM_METRICS}
)
# Collections that make no sense outside training (no backward pass in EVAL/PREDICT).
TRAIN_ONLY_COLLECTIONS = frozenset(
    {CollectionKeys.GRADIENTS, CollectionKeys.OPTIMIZER_VARIABLES}
)

_DEFAULT_REGEXES = {
    CollectionKeys.WEIGHTS: "^(?!gradient).*weight",
    CollectionKeys.BIASES: "^(?!gradient).*bias",
    CollectionKeys.GRADIENTS: "^gradient",
    CollectionKeys.LOSSES: "[Ll]oss_(?!input).*output",
}


class Collection:
    """A group of tensors: by regex (``include_regex``) and by name (``tensor_names``).

    ``save_config`` and ``reduction_config`` override the hook's for the
    collection's tensors; left None, the hook's apply.
    """

    def __init__(
        self,
        name: str,
        include_regex: Optional[Iterable[str]] = None,
        tensor_names: Optional[Iterable[str]] = None,
        reduction_config: Optional[ReductionConfig] = None,
        save_config: Union[SaveConfig, Dict[Any, SaveConfigMode], None] = None,
        save_histogram: bool = True,
    ):
        if not isinstance(name, str) or not name:
            raise ValueError(f"collection name {name!r} must be a non-empty string")
        self.name = name
        # Bumped on every change, so the hook knows to recompute its name->collections cache.
        self._version = 0
        self.include_regex: List[str] = []
        self._compiled: List[Pattern[str]] = []
        if include_regex is not None:
            self.include(list(include_regex) if not isinstance(include_regex, str) else include_regex)
        self.tensor_names: Set[str] = set(tensor_names or ())
        self.reduction_config = reduction_config
        self.save_config = save_config
        self.save_histogram = save_histogram
        # module -> (include_inputs, include_outputs); names resolved when the hook prepares.
        self._modules: Dict[Any, Tuple[bool, bool]] = {}

    def _changed(self) -> None:
        self._version = getattr(self, "_version", 0) + 1
        config_changes.bump()

    # -- membership ---------------------------------------------------------
    def include(self, t: Union[str, List[str]]) -> None:
        """Adds one regex or a list of regexes."""
        if isinstance(t, (list, tuple)):
            for i in t:
                self.include(i)
        elif isinstance(t, str):
            self._compiled.append(re.compile(t))
            self.include_regex.append(t)
            self._changed()
        else:
            raise TypeError("Can only include str or list")

    def add_tensor_name(self, tname: str) -> None:
        if tname not in self.tensor_names:
            self.tensor_names.add(tname)
            self._changed()

    def remove_tensor_name(self, tname: str) -> None:
        if tname in self.tensor_names:
            self.tensor_names.discard(tname)
            self._changed()

    def has_tensor_name(self, tname: str) -> bool:
        return tname in self.tensor_names

    def has_tensor(self, tname: str) -> bool:
        """True if ``tname`` was saved as part of this collection (``has_tensor_name``)."""
        return tname in self.tensor_names

    def add_module_tensors(self, module: Any, inputs: bool = False, outputs: bool = True) -> None:
        """Includes the inputs and/or outputs of ``module`` (a registered submodule)."""
        self._modules[module] = (bool(inputs), bool(outputs))
        self._changed()

    @property
    def modules(self) -> Dict[Any, Tuple[bool, bool]]:
        return self._modules

    def matches(self, tname: str) -> bool:
        """True if ``tname`` is one of ``tensor_names`` or any regex finds it (re.search)."""
        if tname in self.tensor_names:
            return True
        for rx in self._compiled:
            if rx.search(tname):
                return True
        return False

    # -- configs ------------------------------------------------------------
    @property
    def save_config(self) -> Optional[SaveConfig]:
        return self._save_config

    @save_config.setter
    def save_config(self, value: Union[SaveConfig, Dict[Any, SaveConfigMode], None]) -> None:
        if value is None or isinstance(value, SaveConfig):
            self._save_config = value
        elif isinstance(value, SaveConfigMode):
            self._save_config = SaveConfig.from_save_config_mode(value)
        elif isinstance(value, dict):
            self._save_config = SaveConfig(mode_save_configs=dict(value))
        else:
            raise TypeError(
                f"save_config={value!r} must be a SaveConfig or a dict {{mode: SaveConfigMode}}"
            )
        self._changed()

    @property
    def reduction_config(self) -> Optional[ReductionConfig]:
        return self._reduction_config

    @reduction_config.setter
    def reduction_config(self, value: Optional[ReductionConfig]) -> None:
        if value is not None and not isinstance(value, ReductionConfig):
            raise TypeError(f"reduction_config={value!r} must be a ReductionConfig")
        self._reduction_config = value
        self._changed()

    def to_json_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "include_regex": list(self.include_regex),
            "tensor_names": sorted(self.tensor_names),
            "reduction_config": self.reduction_config.to_json_dict()
            if self.reduction_config
            else None,
            "save_config": self.save_config.to_json_dict() if self.save_config else None,
            "save_histogram": self.save_histogram,
        }

    def to_json(self) -> str:
        import json

        return json.dumps(self.to_json_dict())

    def __str__(self) -> str:
        return str(self.to_json_dict())

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        # smdebug's: every configured field (modules added with
        # add_module_tensors are not compared, as smdebug has none).
        if not isinstance(other, Collection):
            return NotImplemented
        return (
            self.name == other.name
            and self.include_regex == other.include_regex
            and self.tensor_names == other.tensor_names
            and self.reduction_config == other.reduction_config
            and self.save_config == other.save_config
            and self.save_histogram == other.save_histogram
        )

    def __repr__(self) -> str:
        return f"<class Collection: name={self.name}>"


class CollectionManager:
    """The collections of one hook, created with PyTorch's built-in ones."""

    def __init__(self, create_default: bool = True):
        self.collections: Dict[str, Collection] = {}
        if create_default:
            for name in DEFAULT_PYTORCH_COLLECTIONS:
                self.create_collection(name)
            for name, rx in _DEFAULT_REGEXES.items():
                self.collections[name].include(rx)

    def create_collection(self, name: str) -> Collection:
        if name not in self.collections:
            self.collections[name] = Collection(name)
            config_changes.bump()
        return self.collections[name]

    def get(self, name: str, create: bool = True) -> Collection:
        if name not in self.collections:
            if not create:
                raise KeyError(f"no collection named {name!r}")
            self.create_collection(name)
        return self.collections[name]

    def add(self, collection: Collection) -> None:
        if not isinstance(collection, Collection):
            raise TypeError(
                f"collection must be a tensorkeep.pytorch.Collection, not {type(collection)}"
            )
        self.collections[collection.name] = collection
        config_changes.bump()

    def get_collections(self) -> Dict[str, Collection]:
        return self.collections

    def version(self) -> int:
        return sum(c._version for c in self.collections.values()) + len(self.collections)
