"""SageMaker's JSON hook configuration, as smdebug reads it.

``Hook.create_from_json_file(path)`` and ``get_hook(create_if_not_exists=True)``
build a hook from the file SageMaker writes for a training job
(``/opt/ml/input/config/debughookconfig.json``, or the path in
``SMDEBUG_CONFIG_FILE_PATH``)::

    {
      "LocalPath": "tensorkeep://collector:7077/my-trial",
      "HookParameters": {"save_interval": "10", "include_regex": "fc1.*,fc2.*",
                         "reductions": "mean,abs_l2_norm", "eval.save_interval": "1"},
      "CollectionConfigurations": [
        {"CollectionName": "gradients", "CollectionParameters": {"save_steps": "0,5"}}
      ]
    }

The keys and their meaning are smdebug 1.0.34's (``smdebug/core/json_config.py``):
``HookParameters`` holds the hook's ``save_interval``, ``save_steps``,
``start_step``, ``end_step`` (each optionally prefixed ``train.``, ``eval.``,
``predict.`` or ``global.`` for one mode), ``reductions``, ``save_all``,
``include_regex``, ``include_workers``, ``export_tensorboard`` and
``tensorboard_dir``; every ``CollectionConfigurations`` entry is included and
may set the same save keys, ``reductions``, ``include_regex`` and
``save_histogram`` for its collection, its save configuration defaulting to the
hook's. The one difference: ``LocalPath`` is the trial's ``tensorkeep://`` URL,
not a directory (``S3Path`` is ignored).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, List, Optional

from ._modes import EVAL, GLOBAL, PREDICT, TRAIN
from .reduction_config import ReductionConfig
from .save_config import SaveConfig, SaveConfigMode

CONFIG_FILE_PATH_ENV = "SMDEBUG_CONFIG_FILE_PATH"
DEFAULT_CONFIG_FILE_PATH = "/opt/ml/input/config/debughookconfig.json"

_MODE_PREFIXES = ((TRAIN, "train."), (EVAL, "eval."), (PREDICT, "predict."), (GLOBAL, "global."))
_logger = logging.getLogger("tensorkeep")


def config_path(json_config_path: Optional[str]) -> str:
    """The file to read: the argument, else $SMDEBUG_CONFIG_FILE_PATH, else SageMaker's path."""
    if json_config_path is not None:
        return json_config_path
    return os.environ.get(CONFIG_FILE_PATH_ENV, DEFAULT_CONFIG_FILE_PATH)


def load(json_config_path: Optional[str]) -> Dict[str, Any]:
    """The configuration as a dict. FileNotFoundError when the file is missing (as
    smdebug); ValueError naming the file when it is not a JSON object."""
    path = config_path(json_config_path)
    with open(path) as f:
        try:
            params = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"hook configuration {path} is not valid JSON: {e}") from None
    if not isinstance(params, dict):
        raise ValueError(f"hook configuration {path} must be a JSON object, not {type(params).__name__}")
    _logger.info("tensorkeep: creating the hook from the JSON configuration at %s", path)
    return params


def _split(value: Any) -> List[str]:
    """smdebug's split: "a, b,c" -> ["a", "b", "c"]; a list is taken as it is."""
    if isinstance(value, (list, tuple)):
        return [str(x).strip() for x in value]
    return [x.strip() for x in str(value).split(",")]


def _bool(value: Any, default: bool) -> bool:
    """smdebug's parse_bool: True/False or "true"/"false" (either case of the first letter)."""
    if value is None:
        return default
    if value in (True, False):
        return bool(value)
    if value in ("True", "true"):
        return True
    if value in ("False", "false"):
        return False
    raise ValueError(f"boolean argument expected, but found {value!r}")


def _int(value: Any, key: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def _save_params(params: Dict[str, Any], prefix: str) -> Dict[str, Any]:
    """The save keys of ``params`` that start with ``prefix``, parsed."""
    out: Dict[str, Any] = {}
    for key in ("save_interval", "start_step", "end_step"):
        if prefix + key in params:
            out[key] = _int(params[prefix + key], prefix + key)
    if prefix + "save_steps" in params:
        out["save_steps"] = [_int(x, prefix + "save_steps") for x in _split(params[prefix + "save_steps"]) if x]
    return out


def save_config_modes(params: Dict[str, Any], base: Optional[Dict[Any, Dict[str, Any]]] = None) -> Dict[Any, Dict[str, Any]]:
    """{mode: save parameters}: the unprefixed keys, overridden per mode by the
    prefixed ones, over ``base`` (the hook's, for a collection)."""
    if not isinstance(params, dict):
        raise ValueError(f"parameters must be a JSON object, got {params!r}")
    common = _save_params(params, "")
    modes: Dict[Any, Dict[str, Any]] = {}
    for mode, prefix in _MODE_PREFIXES:
        merged = dict(base[mode]) if base else {}
        merged.update(common)
        merged.update(_save_params(params, prefix))
        modes[mode] = merged
    return modes


def _save_config(modes: Dict[Any, Dict[str, Any]]) -> SaveConfig:
    return SaveConfig.parse({mode: SaveConfigMode.from_dict(values) for mode, values in modes.items()})


def create_hook(hook_cls: Any, json_config_path: Optional[str]) -> Any:
    """A ``hook_cls`` built from the JSON configuration (see the module's docstring)."""
    params = load(json_config_path)
    path = config_path(json_config_path)
    out_dir = params.get("LocalPath")
    if not isinstance(out_dir, str) or not out_dir.startswith("tensorkeep://"):
        raise ValueError(
            f"hook configuration {path}: LocalPath must be the trial's URL, "
            f"tensorkeep://HOST:PORT/TRIAL (got {out_dir!r})"
        )
    hook_params = params.get("HookParameters") or {}
    if not isinstance(hook_params, dict):
        raise ValueError(f"hook configuration {path}: HookParameters must be a JSON object")
    base_modes = save_config_modes(hook_params)

    collections = params.get("CollectionConfigurations")
    include_collections: Optional[List[str]] = None
    if collections is not None:
        if not isinstance(collections, list):
            raise ValueError(f"hook configuration {path}: CollectionConfigurations must be a list")
        include_collections = []
        for entry in collections:
            if not isinstance(entry, dict) or "CollectionName" not in entry:
                raise ValueError(f"hook configuration {path}: must specify 'CollectionName' in every collection configuration")
            include_collections.append(str(entry["CollectionName"]))

    kwargs: Dict[str, Any] = {
        "out_dir": out_dir,
        "save_config": _save_config(base_modes),
        "include_collections": include_collections,
        "save_all": _bool(hook_params.get("save_all"), False),
        "include_workers": hook_params.get("include_workers", "one"),
        "export_tensorboard": _bool(hook_params.get("export_tensorboard"), False),
        "tensorboard_dir": hook_params.get("tensorboard_dir"),
    }
    if "reductions" in hook_params:
        kwargs["reduction_config"] = ReductionConfig.from_dict(hook_params)
    if "include_regex" in hook_params:
        kwargs["include_regex"] = _split(hook_params["include_regex"])
    hook = hook_cls(**kwargs)

    for entry in collections or ():
        coll_params = entry.get("CollectionParameters") or {}
        if not isinstance(coll_params, dict):
            raise ValueError(f"hook configuration {path}: CollectionParameters of {entry['CollectionName']!r} must be a JSON object")
        coll = hook.get_collection(str(entry["CollectionName"]))
        coll.save_config = _save_config(save_config_modes(coll_params, base_modes))
        if "reductions" in coll_params:
            coll.reduction_config = ReductionConfig.from_dict(coll_params)
        if "include_regex" in coll_params:
            coll.include(_split(coll_params["include_regex"]))
        if "save_histogram" in coll_params:
            coll.save_histogram = _bool(coll_params["save_histogram"], True)
    return hook
