"""deploy/: the Kubernetes manifests, the Dockerfile's entrypoint and the
systemd unit agree with `tensorkeep-server --help` (every flag they pass
exists, every port is the one the collector listens on), and the manifests
have what scaling out needs (docs/scaling-out.md): a headless Service, a
StatefulSet whose --cluster list is its pods' stable names and whose
--advertise comes from the pod name, a volume per pod, health probes,
resources and Secrets."""

import os
import pathlib
import re
import shlex
import subprocess

import pytest

from tensorkeep import _rendezvous

yaml = pytest.importorskip("yaml", reason="python3-yaml is not installed (scripts/install-deps.sh)")

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _bin(name):
    return os.path.join(os.environ.get("TK_BIN_DIR", str(ROOT / "build" / "bin")), name)


@pytest.fixture(scope="module")
def server_flags():
    binary = _bin("tensorkeep-server")
    if not os.access(binary, os.X_OK):
        if "TK_BIN_DIR" in os.environ:
            pytest.fail(f"{binary} not built")
        pytest.skip(f"{binary} not built")
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", text))
    assert {"--listen", "--cluster", "--advertise", "--data-dir"} <= flags
    return flags


@pytest.fixture(scope="module")
def cli_flags():
    binary = _bin("tensorkeep")
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} not built")
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", text)), text


def _docs():
    with open(DEPLOY / "kubernetes" / "tensorkeep.yaml") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def _entrypoint():
    text = (DEPLOY / "Dockerfile").read_text()
    m = re.search(r"^ENTRYPOINT (\[.*?\])\s*$", text.replace("\\\n", " "), re.M)
    assert m, "deploy/Dockerfile has no ENTRYPOINT [...]"
    return yaml.safe_load(m.group(1))


def _flags_of(argv):
    return [a for a in argv if a.startswith("--")]


def _value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_manifests_parse_and_fit_together(server_flags, cli_flags):
    docs = _docs()
    kinds = {d["kind"]: d for d in docs}
    assert {"Service", "StatefulSet"} <= set(kinds)
    svc, sts = kinds["Service"], kinds["StatefulSet"]
    # A headless Service named as the StatefulSet's serviceName.
    assert svc["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    namespace = sts["metadata"].get("namespace", "default")
    assert svc["metadata"].get("namespace", "default") == namespace

    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    argv = _entrypoint() + c["args"]
    assert argv[0].endswith("tensorkeep-server")
    for flag in _flags_of(argv[1:]):
        assert flag in server_flags, f"{flag} is not a tensorkeep-server flag"

    # Ports: the listen port is the container's, the Service's, the cluster's.
    listen_port = int(_value(argv, "--listen").rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["grpc"] == listen_port
    (sport,) = svc["spec"]["ports"]
    assert sport["port"] == listen_port and sport["targetPort"] in ("grpc", listen_port)

    # --cluster: exactly the StatefulSet's pods, by their stable DNS names;
    # --advertise: the pod's own one, from the downward API.
    name, service, replicas = sts["metadata"]["name"], svc["metadata"]["name"], sts["spec"]["replicas"]
    expected = [f"{name}-{i}.{service}.{namespace}.svc:{listen_port}" for i in range(replicas)]
    assert _value(argv, "--cluster").split(",") == expected
    assert _value(argv, "--advertise") == f"$(POD_NAME).{service}.{namespace}.svc:{listen_port}"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # Every pod owns some trials (the list is one clients can use as is).
    owners = {_rendezvous.owner(expected, f"job-{k}") for k in range(200)}
    assert owners == set(expected)

    # A volume per pod, mounted where --data-dir points.
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert _value(argv, "--data-dir").startswith(mounts[claim["metadata"]["name"]])

    # TLS and tokens from Secrets, mounted where the flags point.
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    for flag in ("--tls-cert", "--tls-key", "--auth-tokens"):
        path = _value(argv, flag)
        assert any(path.startswith(mounts[v] + "/") for v in secrets), f"{flag} {path} is not in a Secret"

    # Start-up, readiness and liveness through the gRPC health service, on the
    # port; the start-up probe allows a long recovery (NOT_SERVING until done)
    # before liveness may restart the pod.
    flags, help_text = cli_flags
    assert re.search(r"^\s+health\b", help_text, re.M)
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c[probe]
        if "grpc" in p:
            assert p["grpc"]["port"] == listen_port
            continue
        cmd = p["exec"]["command"]
        assert cmd[0].endswith("/tensorkeep") and cmd[-1] == "health"
        for flag in _flags_of(cmd):
            assert flag in flags, f"{probe}: {flag} is not a tensorkeep flag"
        assert _value(cmd, "--server").endswith(f":{listen_port}")
        ca = _value(cmd, "--tls-ca")
        assert any(ca.startswith(mounts[v] + "/") for v in secrets)

    # Resources: requests and a memory limit above the memory budget it is given.
    res = c["resources"]
    assert "cpu" in res["requests"] and "memory" in res["requests"]
    limit = res["limits"]["memory"]
    assert limit.endswith("Gi") or limit.endswith("Mi")
    limit_mib = int(limit[:-2]) * (1024 if limit.endswith("Gi") else 1)
    assert limit_mib > int(_value(argv, "--memory-budget-mb")) + 256


def test_systemd_unit_flags(server_flags):
    text = (DEPLOY / "tensorkeep-server.service").read_text().replace("\\\n", " ")
    (line,) = [l for l in text.splitlines() if l.startswith("ExecStart=")]
    argv = shlex.split(line[len("ExecStart="):])
    assert argv[0].endswith("tensorkeep-server")
    for flag in _flags_of(argv[1:]):
        assert flag in server_flags, f"{flag} is not a tensorkeep-server flag"
    assert _value(argv, "--listen").endswith(":7077")
