"""should_stop() for a rank that does not save: polls the collector."""

import logging
import time
from typing import Any

logger = logging.getLogger("tensorkeep.pytorch")


class StopPoller:
    """should_stop() for a process that does not save (include_workers='one', rank > 0):
    asks the collector for the trial's stop request (GetTrial) at most once a second."""

    def __init__(self, out_dir: str):
        from tensorkeep import _address

        self._addr = _address.parse(out_dir, write=True)
        self._last = 0.0
        self._value = False
        self._channel: Any = None
        self._get_trial: Any = None

    def __call__(self) -> bool:
        if self._value:
            return True
        now = time.monotonic()
        if now - self._last < 1.0:
            return False
        self._last = now
        try:
            if self._get_trial is None:
                from tensorkeep import _channel

                self._channel = _channel.open_channel(self._addr.target)
                self._get_trial = self._channel.unary_unary(
                    _channel.method("GetTrial"),
                    request_serializer=_channel.pb.TrialRef.SerializeToString,
                    response_deserializer=_channel.pb.TrialSummary.FromString,
                )
                self._ref = _channel.pb.TrialRef(trial=self._addr.trial)
            self._value = bool(self._get_trial(self._ref, timeout=2.0).stop_requested)
        except Exception as e:  # noqa: BLE001 - the trial may not exist yet
            logger.debug("tensorkeep: stop request poll failed: %s", e)
        return self._value

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._get_trial = None
