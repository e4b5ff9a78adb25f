"""When the hook saves: smdebug's ``SaveConfig`` and ``SaveConfigMode``.

A step is saved if it is in ``save_steps``, or if ``start_step <= step < end_step``
and ``step % save_interval == 0``. The step compared is the *mode step* of the
mode the hook is in (for ``modes.GLOBAL``, the global step), exactly as smdebug
does. A ``SaveConfig`` holds one ``SaveConfigMode`` per mode, so training and
evaluation can be saved at different frequencies::

    SaveConfig(save_interval=100)                       # every mode alike
    SaveConfig(mode_save_configs={
        modes.TRAIN: SaveConfigMode(save_interval=100),
        modes.EVAL: SaveConfigMode(save_interval=1),
    })                                                  # other modes: the hook's default
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from . import config_changes
from ._modes import ALL_MODES, mode_name, mode_value

DEFAULT_SAVE_CONFIG_INTERVAL = 500
DEFAULT_SAVE_CONFIG_START_STEP = 0
DEFAULT_SAVE_CONFIG_END_STEP = None

__all__ = ["SaveConfig", "SaveConfigMode"]


def _int_arg(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name}={value!r} must be an int")
    if isinstance(value, str):
        value = value.strip()
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}={value!r} must be an int") from None


class _SaveSteps(list):
    """``SaveConfigMode.save_steps`` as the constructor makes it: a list that
    counts its changes in place (``scm.save_steps.append(7)``, as smdebug
    scripts do) in config_changes, so that the hook sees them."""

    __slots__ = ()


def _counted(name: str) -> Any:
    method = getattr(list, name)

    def changed(self: _SaveSteps, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:  # after the change: a step between the two sees the new list
            config_changes.bump()

    changed.__name__ = name
    return changed


for _name in ("append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
              "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(_SaveSteps, _name, _counted(_name))


class SaveConfigMode:
    """The save configuration of one mode.

    Parameters:
      save_interval (int): save every n steps (default 500).
      save_steps (list of int): also save at each of these steps.
      start_step (int): save from this step on (default 0).
      end_step (int or None): stop saving at this step (exclusive; None: never).
    """

    __slots__ = ("save_interval", "save_steps", "start_step", "end_step")

    def __setattr__(self, name: str, value: Any) -> None:
        # Counted (config_changes), so that the hook sees a change made after
        # it was made. A list assigned to save_steps is kept as it is (the
        # script may change it in place later): its changes are not counted,
        # so next_save_step does not look ahead past it.
        object.__setattr__(self, name, value)
        config_changes.bump()

    def __reduce__(self) -> Any:
        return (SaveConfigMode, (self.save_interval, self.start_step, self.end_step, list(self.save_steps)))

    def __init__(
        self,
        save_interval: Union[int, str, None] = None,
        start_step: Union[int, str, None] = None,
        end_step: Union[int, str, None] = None,
        save_steps: Optional[List[int]] = None,
    ):
        self.save_interval = (
            DEFAULT_SAVE_CONFIG_INTERVAL
            if save_interval is None
            else _int_arg("save_interval", save_interval)
        )
        if self.save_interval <= 0:
            raise ValueError(f"save_interval={self.save_interval} must be positive")
        if save_steps is None:
            self.save_steps: List[int] = _SaveSteps()
        elif isinstance(save_steps, (list, tuple, set, frozenset)):
            self.save_steps = _SaveSteps(sorted(_int_arg("save_steps", s) for s in save_steps))
        else:
            raise TypeError(f"save_steps={save_steps!r} must be a list of int")
        self.start_step = (
            DEFAULT_SAVE_CONFIG_START_STEP
            if start_step is None
            else _int_arg("start_step", start_step)
        )
        self.end_step = None if end_step is None else _int_arg("end_step", end_step)

    def should_save_step(self, step_num: int) -> bool:
        """True if ``step_num`` (a step of this mode) is to be saved.

        Reads the attributes at each call, so changes after construction (e.g.
        ``scm.save_steps.append(7)`` or ``scm.save_steps = [...]``) are honoured, as
        in smdebug."""
        save_steps = self.save_steps
        if save_steps and step_num in save_steps:
            return True
        if step_num < self.start_step:
            return False
        if self.end_step is not None and step_num >= self.end_step:
            return False
        return step_num % self.save_interval == 0

    def next_save_step(self, step_num: int) -> Optional[int]:
        """The first step at or after ``step_num`` that ``should_save_step``
        saves, as the attributes are now; None if there is none. Only
        ``step_num`` itself (no look-ahead) when a later change could go
        uncounted (config_changes): ``save_steps`` a list or set the script
        assigned (it may change it in place), or ``should_save_step``
        overridden by a subclass that does not override this too."""
        cls = type(self)
        steps = self.save_steps
        if (
            (cls.should_save_step is not SaveConfigMode.should_save_step
             and cls.next_save_step is SaveConfigMode.next_save_step)
            or not isinstance(steps, (_SaveSteps, tuple, frozenset))
        ):
            return step_num
        try:
            found = [s for s in steps if s >= step_num]
            first = max(step_num, self.start_step)
            first += -first % self.save_interval
            if self.end_step is None or first < self.end_step:
                found.append(first)
            return min(found) if found else None
        except (TypeError, ValueError, ZeroDivisionError):
            # An attribute set to something should_save_step does not expect
            # (a step that is not a number): no look-ahead, it decides.
            return step_num

    def to_json_dict(self) -> Dict[str, Any]:
        return {
            "save_interval": self.save_interval,
            "save_steps": list(self.save_steps),
            "start_step": self.start_step,
            "end_step": self.end_step,
        }

    @classmethod
    def from_dict(
        cls, params: Optional[Dict[str, Any]], default_values: Optional[Dict[str, Any]] = None
    ) -> Optional["SaveConfigMode"]:
        if params is None:
            return None
        if not isinstance(params, dict):
            raise TypeError(f"params={params!r} is not a dict")
        default_values = default_values or {}
        unknown = set(params) - {"save_interval", "save_steps", "start_step", "end_step"}
        if unknown:
            raise ValueError(f"unknown save config parameters: {sorted(unknown)}")
        return cls(
            save_interval=params.get("save_interval", default_values.get("save_interval")),
            start_step=params.get("start_step", default_values.get("start_step")),
            end_step=params.get("end_step", default_values.get("end_step")),
            save_steps=params.get("save_steps", default_values.get("save_steps")),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SaveConfigMode):
            return NotImplemented
        return self.to_json_dict() == other.to_json_dict()

    def __hash__(self) -> int:
        return hash((self.save_interval, tuple(self.save_steps), self.start_step, self.end_step))

    def __repr__(self) -> str:
        return (
            f"<class SaveConfigMode: save_interval={self.save_interval}, "
            f"save_steps={self.save_steps}, start_step={self.start_step}, "
            f"end_step={self.end_step}>"
        )


class SaveConfig:
    """Maps each mode to a ``SaveConfigMode``.

    Pass the mode-less parameters (``save_interval``, ``start_step``, ``end_step``,
    ``save_steps``) to use the same configuration in every mode, or
    ``mode_save_configs={mode: SaveConfigMode, ...}``; a mode missing from that dict
    (or mapped to None) takes the hook's default configuration for that mode when
    the configuration is attached to a collection, and ``SaveConfigMode()`` otherwise.
    """

    def __init__(
        self,
        mode_save_configs: Optional[Dict[Any, Optional[SaveConfigMode]]] = None,
        save_interval: Union[int, str, None] = None,
        start_step: Union[int, str, None] = None,
        end_step: Union[int, str, None] = None,
        save_steps: Optional[List[int]] = None,
    ):
        if mode_save_configs is None:
            one = SaveConfigMode(
                save_interval=save_interval,
                start_step=start_step,
                end_step=end_step,
                save_steps=save_steps,
            )
            self.mode_save_configs: Dict[int, Optional[SaveConfigMode]] = {
                m: one for m in ALL_MODES
            }
        else:
            if not isinstance(mode_save_configs, dict):
                raise TypeError("mode_save_configs must be a dict {mode: SaveConfigMode}")
            if any(
                x is not None for x in (save_interval, start_step, end_step, save_steps)
            ):
                raise ValueError(
                    "pass either mode_save_configs or the mode-less parameters, not both"
                )
            configs: Dict[int, Optional[SaveConfigMode]] = {m: None for m in ALL_MODES}
            for mode, cfg in mode_save_configs.items():
                if isinstance(cfg, dict):
                    cfg = SaveConfigMode.from_dict(cfg)
                if cfg is not None and not isinstance(cfg, SaveConfigMode):
                    raise TypeError(
                        f"mode_save_configs[{mode!r}]={cfg!r} must be a SaveConfigMode"
                    )
                configs[mode_value(mode)] = cfg
            self.mode_save_configs = configs

    def get_save_config(self, mode: Any) -> SaveConfigMode:
        cfg = self.mode_save_configs[mode_value(mode)]
        if cfg is None:
            raise ValueError(f"{self!r} has no configuration for mode {mode_name(mode)}")
        return cfg

    def set_save_config(self, mode: Any, save_config_mode: SaveConfigMode) -> None:
        if not isinstance(save_config_mode, SaveConfigMode):
            raise TypeError(f"save_config_mode={save_config_mode!r} must be a SaveConfigMode")
        self.mode_save_configs[mode_value(mode)] = save_config_mode

    def should_save_step(self, mode: Any, step_num: int) -> bool:
        """True if step ``step_num`` of ``mode`` is to be saved."""
        return self.get_save_config(mode).should_save_step(step_num)

    def merge_default_save_config(self, default_save_config: "SaveConfig") -> None:
        """Fills the modes this configuration leaves unset from ``default_save_config``."""
        for m in ALL_MODES:
            if self.mode_save_configs.get(m) is None:
                d = default_save_config.mode_save_configs.get(m)
                self.mode_save_configs[m] = d if d is not None else SaveConfigMode()

    def to_json_dict(self) -> Dict[str, Any]:
        return {
            mode_name(m): (c.to_json_dict() if c is not None else None)
            for m, c in self.mode_save_configs.items()
        }

    @classmethod
    def from_dict(cls, params: Optional[Dict[Any, Any]]) -> Optional["SaveConfig"]:
        if params is None:
            return None
        return cls(mode_save_configs=dict(params))

    @classmethod
    def from_save_config_mode(cls, save_config_mode: SaveConfigMode) -> "SaveConfig":
        return cls(mode_save_configs={m: save_config_mode for m in ALL_MODES})

    @classmethod
    def parse(cls, obj: Any) -> "SaveConfig":
        """None, a SaveConfig, a SaveConfigMode or a {mode: SaveConfigMode|dict} dict."""
        if obj is None:
            return cls()
        if isinstance(obj, SaveConfig):
            return obj
        if isinstance(obj, SaveConfigMode):
            return cls.from_save_config_mode(obj)
        if isinstance(obj, dict):
            sc = cls(mode_save_configs=dict(obj))
            sc.merge_default_save_config(cls())
            return sc
        raise TypeError(f"save_config={obj!r} cannot be parsed into a SaveConfig")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SaveConfig):
            return NotImplemented
        return self.mode_save_configs == other.mode_save_configs

    def __repr__(self) -> str:
        return f"<class SaveConfig: {self.mode_save_configs}>"
