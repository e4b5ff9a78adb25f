"""The Python client against a collector with TLS, mutual TLS and tokens
(tensorkeep-server processes; certificates made by the openssl command):
accepted and refused connections say why, roles and trial prefixes hold, and
the standard health service answers without a token."""

import hashlib
import os
import shutil
import subprocess

import grpc
import numpy as np
import pytest

import tensorkeep
from tensorkeep import Writer
from tensorkeep.exceptions import CollectorUnavailable, TensorkeepError
from tensorkeep.trials import create_trial

from conftest import DEFAULT_BIN_DIR, ServerProcess, release_clients, server_binary

READ = "tk_py_read_token_0123456789"
WRITE = "tk_py_write_token_0123456789"
TEAM = "tk_py_team_token_0123456789"  # write, trials starting with team-a- only


def _line(token: str, rest: str) -> str:
    return f"sha256:{hashlib.sha256(token.encode()).hexdigest()} {rest}\n"


@pytest.fixture
def certs(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (apt-get install openssl)")
    d = tmp_path / "certs"
    d.mkdir()
    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    script = f"""set -e; cd {d}
openssl req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj /CN=tk-py-ca
openssl req {key} -keyout server.key -out server.csr -subj /CN=localhost
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext
openssl req {key} -keyout client.key -out client.csr -subj /CN=client
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2
"""
    subprocess.run(["sh", "-c", script], check=True, capture_output=True)
    return {n: str(d / n) for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


@pytest.fixture
def tokens(tmp_path):
    p = tmp_path / "tokens"
    p.write_text(_line(READ, "read reader") + _line(WRITE, "write writer") + _line(TEAM, "write team team-a-"))
    return str(p)


@pytest.fixture
def start(tmp_path, monkeypatch):
    if server_binary() is None:
        pytest.skip("tensorkeep-server not built")
    for env in ("TENSORKEEP_TLS_CA", "TENSORKEEP_TLS_CERT", "TENSORKEEP_TLS_KEY", "TENSORKEEP_TOKEN"):
        monkeypatch.delenv(env, raising=False)
    started = []

    def run(*args: str) -> ServerProcess:
        data = tmp_path / f"data{len(started)}"
        data.mkdir()
        s = ServerProcess(str(data), str(tmp_path / f"server{len(started)}.log"))
        s.start(extra_args=args)
        started.append(s)
        return s

    yield run
    tensorkeep.set_credentials()
    release_clients()
    for s in started:
        s.stop()


def _write_and_read(url: str) -> None:
    w = Writer(url, retry_timeout=5)
    w.write_tensor("x", np.arange(4, dtype=np.float32), step=0)
    w.end_step(0)
    w.flush()
    w.close()
    t = create_trial(url)
    assert np.array_equal(t.tensor("x").value(0), np.arange(4, dtype=np.float32))


def test_tls_and_token_from_environment(start, certs, tokens, monkeypatch):
    s = start("--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"], "--auth-tokens", tokens)
    monkeypatch.setenv("TENSORKEEP_TLS_CA", certs["ca.pem"])
    monkeypatch.setenv("TENSORKEEP_TOKEN", WRITE)
    _write_and_read(s.url("team-b-env"))


def test_plaintext_client_against_tls_says_so(start, certs):
    s = start("--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"])
    with pytest.raises(CollectorUnavailable, match="uses TLS but this client connects in plaintext"):
        create_trial(s.url("t")).steps()
    tensorkeep.set_credentials(tls_ca=certs["ca.pem"])
    assert create_trial(s.url("t")).trial == "t"


def test_tls_client_against_plaintext_says_so(start, certs):
    s = start()
    tensorkeep.set_credentials(tls_ca=certs["ca.pem"])
    with pytest.raises(CollectorUnavailable, match="does not use TLS but this client does"):
        create_trial(s.url("t")).steps()


def test_mutual_tls(start, certs):
    s = start(
        "--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"],
        "--tls-client-ca", certs["ca.pem"],
    )
    tensorkeep.set_credentials(tls_ca=certs["ca.pem"])
    with pytest.raises(CollectorUnavailable, match="client certificates"):
        create_trial(s.url("t")).steps()
    tensorkeep.set_credentials(tls_ca=certs["ca.pem"], tls_cert=certs["client.pem"], tls_key=certs["client.key"])
    _write_and_read(s.url("mtls"))


def test_roles_and_prefixes(start, certs, tokens):
    s = start("--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"], "--auth-tokens", tokens)
    tensorkeep.set_credentials(tls_ca=certs["ca.pem"])
    with pytest.raises(TensorkeepError, match="needs a token") as e:
        create_trial(s.url("t")).steps()
    assert e.value.code == "UNAUTHENTICATED"
    tensorkeep.set_credentials(tls_ca=certs["ca.pem"], token=READ)
    w = Writer(s.url("team-a-run"), retry_timeout=5)
    w.write_tensor("x", np.zeros(2, np.float32), step=0)
    with pytest.raises(TensorkeepError, match="has role read") as e:
        w.flush(timeout=10)
    assert e.value.code == "PERMISSION_DENIED"
    tensorkeep.set_credentials(tls_ca=certs["ca.pem"], token=TEAM)
    _write_and_read(s.url("team-a-run"))
    w = Writer(s.url("team-b-run"), retry_timeout=5)
    w.write_tensor("x", np.zeros(2, np.float32), step=0)
    with pytest.raises(TensorkeepError, match="only on trials starting with team-a-"):
        w.flush(timeout=10)


def test_token_without_tls_only_on_loopback(start, tokens):
    s = start("--auth-tokens", tokens)
    tensorkeep.set_credentials(token=READ)
    assert create_trial(s.url("t")).trial == "t"
    with pytest.raises(ValueError, match="clear text"):
        create_trial("tensorkeep://192.0.2.1:7077/t")


def test_health_without_token(start, certs, tokens):
    s = start("--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"], "--auth-tokens", tokens)
    with open(certs["ca.pem"], "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    with grpc.secure_channel(s.address, creds) as ch:
        # grpc_health's stubs are not in Debian's python3-grpcio: the raw
        # method with HealthCheckRequest{} (empty) and the status in field 1.
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"", timeout=10) == b"\x08\x01"  # SERVING
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/tensorkeep.v1.TensorKeep/ListTrials")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


class _SlowLink:
    """A TCP proxy on loopback that holds every byte ``one_way`` seconds in each
    direction (this kernel has no netem): a link with a round trip of twice
    that. One thread pair a direction a connection; closed with the test."""

    def __init__(self, upstream_port: int, one_way: float):
        import socket
        import threading

        self._socket, self._threading = socket, threading
        self.one_way = one_way
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.conns = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                down, _ = self.listener.accept()
            except OSError:  # the 0.2 s timeout, or closed
                continue
            up = self._socket.create_connection(self.upstream, timeout=5)
            self.conns += [down, up]
            for src, dst in ((down, up), (up, down)):
                self._pipe(src, dst)

    def _pipe(self, src, dst) -> None:
        import queue
        import time

        held = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                held.put((time.monotonic() + self.one_way, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = held.get()
                time.sleep(max(0.0, due - time.monotonic()))
                try:
                    if not data:
                        dst.shutdown(self._socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return

        for fn in (read, write):
            t = self._threading.Thread(target=fn, daemon=True)
            t.start()
            self.threads.append(t)

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()
        self.threads[0].join(timeout=5)  # accepts no more: self.conns is final
        for c in self.conns:
            try:  # wakes a thread blocked in recv on it (close alone does not)
                c.shutdown(self._socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        for t in self.threads:
            t.join(timeout=5)


def test_tls_over_a_slow_link(start, certs, tokens, tmp_path):
    """A TLS handshake over a link with a 300 ms round trip completes (TCP and
    TLS need a round trip each). Both clients used to give a connection attempt
    only 100 ms -- gRPC's min_reconnect_backoff_ms is its connect timeout -- so
    over such a link they never connected at all."""
    s = start("--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"], "--auth-tokens", tokens)
    link = _SlowLink(s.port, one_way=0.15)
    try:
        url = f"tensorkeep://127.0.0.1:{link.port}/slow-link"
        tensorkeep.set_credentials(tls_ca=certs["ca.pem"], token=WRITE)
        # The Python client's own channel (reads) and the agent's C++ writer.
        _write_and_read(url)
        # The CLI (C++ client::Connection).
        cli = os.path.join(os.environ.get("TK_BIN_DIR", DEFAULT_BIN_DIR), "tensorkeep")
        out = subprocess.run(
            [cli, "--server", f"127.0.0.1:{link.port}", "--tls-ca", certs["ca.pem"], "--token", READ,
             "steps", "slow-link"],
            capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["0"], out.stdout
    finally:
        link.close()
