"""TLS and token settings of the Python client, in one place (the C++ twin is
client/credentials.h).

Each setting comes from :func:`set_credentials` if given there, else from the
environment, as for the C++ clients:

- ``TENSORKEEP_TLS_CA``: connect with TLS, trusting this CA certificate (PEM);
  unset: plaintext;
- ``TENSORKEEP_TLS_CERT`` / ``TENSORKEEP_TLS_KEY``: a client certificate and key
  for a collector with mutual TLS;
- ``TENSORKEEP_TOKEN``: the bearer token for a collector with ``--auth-tokens``.

A token without TLS is sent only to a loopback address (gRPC's local
credentials); to anything else it is refused rather than sent in clear text.
"""

import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import grpc

ENV_TLS_CA = "TENSORKEEP_TLS_CA"
ENV_TLS_CERT = "TENSORKEEP_TLS_CERT"
ENV_TLS_KEY = "TENSORKEEP_TLS_KEY"
ENV_TOKEN = "TENSORKEEP_TOKEN"


@dataclass(frozen=True)
class Security:
    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    token: Optional[str] = None

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca)


_explicit = Security()


def set_credentials(
    tls_ca: Optional[str] = None,
    tls_cert: Optional[str] = None,
    tls_key: Optional[str] = None,
    token: Optional[str] = None,
) -> None:
    """Sets the TLS files and token of the channels opened from now on in this
    process; an argument left None falls back to its environment variable."""
    global _explicit
    _explicit = Security(tls_ca, tls_cert, tls_key, token)


def resolve() -> Security:
    """The settings in force: :func:`set_credentials`, else the environment."""

    def pick(value: Optional[str], env: str) -> Optional[str]:
        return value if value else (os.environ.get(env) or None)

    return Security(
        pick(_explicit.tls_ca, ENV_TLS_CA),
        pick(_explicit.tls_cert, ENV_TLS_CERT),
        pick(_explicit.tls_key, ENV_TLS_KEY),
        pick(_explicit.token, ENV_TOKEN),
    )


def _split(target: str) -> Tuple[str, str]:
    host, _, port = target.rpartition(":")
    return host.strip("[]"), port


def is_loopback(target: str) -> bool:
    host, _ = _split(target)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"cannot read {what} {path!r}: {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what} {path!r} is not a PEM file (no -----BEGIN line)")
    return data


def channel_credentials(security: Security, target: str) -> Optional[grpc.ChannelCredentials]:
    """The credentials for ``target``; None for a plain insecure channel.

    Raises ValueError for a file that cannot be read, half a client
    certificate, or a token that would cross the network in clear text."""
    if security.tls:
        if bool(security.tls_cert) != bool(security.tls_key):
            raise ValueError(
                f"mutual TLS needs both {ENV_TLS_CERT} and {ENV_TLS_KEY} (tls_cert and tls_key)"
            )
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(security.tls_ca, ENV_TLS_CA),
            private_key=_read(security.tls_key, ENV_TLS_KEY) if security.tls_key else None,
            certificate_chain=_read(security.tls_cert, ENV_TLS_CERT) if security.tls_cert else None,
        )
    elif security.tls_cert or security.tls_key:
        raise ValueError(
            f"a client certificate needs {ENV_TLS_CA}: the CA that signed the collector's certificate"
        )
    elif security.token:
        if not is_loopback(target):
            raise ValueError(
                f"a token would cross the network in clear text to {target}: "
                f"connect with TLS ({ENV_TLS_CA})"
            )
        # gRPC sends call credentials only on a secure channel; local
        # credentials make a loopback connection one (plain HTTP/2 on the wire).
        creds = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    else:
        return None
    if security.token:
        creds = grpc.composite_channel_credentials(
            creds, grpc.access_token_call_credentials(security.token)
        )
    return creds


def open_channel(target: str, options: Sequence[Tuple[str, Any]]) -> grpc.Channel:
    """A channel to ``target`` with the settings in force."""
    creds = channel_credentials(resolve(), target)
    if creds is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(target, creds, options=options)


def probe(target: str) -> Optional[str]:
    """What the collector at ``target`` speaks, by a TLS handshake attempt (at
    most ~6 s): "tls", "plaintext", or None when nothing answers in time."""
    host, port = _split(target)
    try:
        sock = socket.create_connection((host, int(port)), timeout=3.0)
    except (OSError, ValueError):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        with ctx.wrap_socket(sock, server_hostname=host or None):
            return "tls"
    except ssl.SSLError as e:
        # A plaintext gRPC server answers with HTTP/2 frames: not a TLS record.
        if e.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                        "UNEXPECTED_EOF_WHILE_READING", "HTTP_REQUEST"):
            return "plaintext"
        return "tls"  # a TLS alert: the server speaks TLS (e.g. wants a client certificate)
    except socket.timeout:
        return None  # no answer in time: say nothing rather than guess
    except OSError:
        return "plaintext"
    finally:
        sock.close()


def explain_mismatch(target: str) -> str:
    """Why a call to ``target`` was UNAVAILABLE when client and collector
    disagree about TLS; "" when they agree."""
    client_tls = resolve().tls
    speaks = probe(target)
    if speaks == "tls" and not client_tls:
        return (
            f"the collector at {target} uses TLS but this client connects in plaintext: "
            f"set {ENV_TLS_CA} (or tensorkeep.set_credentials(tls_ca=...)) to the CA that "
            "signed its certificate"
        )
    if speaks == "tls":
        return (
            f"the TLS handshake with the collector at {target} failed: is {ENV_TLS_CA} the CA "
            "that signed its certificate, does the certificate name this address, and, if it "
            f"requires client certificates, are {ENV_TLS_CERT}/{ENV_TLS_KEY} one it accepts?"
        )
    if speaks == "plaintext" and client_tls:
        return (
            f"the collector at {target} does not use TLS but this client does ({ENV_TLS_CA}): "
            "unset it, or start the collector with --tls-cert/--tls-key"
        )
    return ""


__all__ = ["Security", "set_credentials", "resolve", "open_channel", "explain_mismatch"]
