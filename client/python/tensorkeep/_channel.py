"""gRPC channels to a collector, and the generated stubs.

The stubs (``tensorkeep._proto.tensorkeep_pb2`` and ``..._pb2_grpc``) are
generated from proto/tensorkeep.proto by the build; they are never committed.
"""

from typing import Any, Tuple

import grpc

from . import _credentials, _names

try:
    from ._proto import tensorkeep_pb2 as pb
    from ._proto import tensorkeep_pb2_grpc as pb_grpc  # noqa: F401 (used by trial.py)
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(
        "tensorkeep's generated gRPC modules are missing: build the project "
        "(cmake --build build --target tk_python) and put build/python on PYTHONPATH"
    ) from e

# The full gRPC name of the service, e.g. "tensorkeep.v1.TensorKeep".
SERVICE = pb.DESCRIPTOR.services_by_name["TensorKeep"].full_name

MAX_MESSAGE_BYTES = 1 << 30

CHANNEL_OPTIONS: Tuple[Tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Reconnect as quickly as writers retry after a collector restart (gRPC's
    # default starts at 1 s and backs off up to 120 s); limits.proto.
    ("grpc.initial_reconnect_backoff_ms", _names.RECONNECT_BACKOFF_FIRST_MS),
    # (gRPC's "min reconnect backoff" is the time a connection attempt is
    # given: its handshakes must fit in it.)
    ("grpc.min_reconnect_backoff_ms", _names.RECONNECT_CONNECT_TIMEOUT_MS),
    ("grpc.max_reconnect_backoff_ms", _names.RECONNECT_BACKOFF_MAX_MS),
    # A collector that hangs (SIGSTOP, a frozen host) keeps the TCP connection
    # open: ping it, and drop the connection when it does not answer, so a
    # writer reconnects (or gives up after its retry_timeout) instead of
    # waiting forever; limits.proto, KeepalivePolicy (the collector permits it).
    ("grpc.keepalive_time_ms", _names.KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", _names.KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


# Server-streaming calls on a channel with this option run on the caller's
# thread instead of handing each message over from gRPC's polling thread:
# ~15 us instead of ~50-70 us a message here (measured: 10,000 TensorValue
# messages of 4 KB take 0.28 s instead of 0.7-0.9 s). The caller blocks in C
# between messages, so Ctrl-C waits for the next message: use it for bulk
# streams that keep flowing (GetValue/GetValues), not for long waits
# (WatchSteps).
_SINGLE_THREADED_STREAMS = ("SingleThreadedUnaryStream", 1)


def open_channel(target: str, bulk: bool = False) -> grpc.Channel:
    """Returns a new channel to the collector at ``target`` (``HOST:PORT``), with
    TLS and token as _credentials says (TENSORKEEP_TLS_CA, TENSORKEEP_TOKEN, ...).

    ``bulk`` makes a channel tuned for server-streaming transfers of values.
    The channel connects lazily; the caller owns it and must close it.
    """
    options = CHANNEL_OPTIONS + ((_SINGLE_THREADED_STREAMS,) if bulk else ())
    return _credentials.open_channel(target, options)


def method(name: str) -> str:
    """The full method path of one of the service's RPCs, e.g. ``/tensorkeep.v1.TensorKeep/Push``."""
    return f"/{SERVICE}/{name}"
