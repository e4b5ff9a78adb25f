"""The hook's TensorBoard export (``Hook(export_tensorboard=True, tensorboard_dir=...)``).

The hook does not write event files itself: it starts ``tensorkeep
export-tensorboard TRIAL DIR --follow`` (the C++ CLI) as a child process, which
follows the trial through WatchSteps and writes one run directory per worker as
steps complete. One implementation of the format (TFRecord, CRC-32C, the
histograms) serves the CLI and the hook; the training process spends nothing on
it; what TensorBoard shows is exactly what the collector holds (complete,
durable steps of every worker, not only this process's).

The CLI is found at ``$TENSORKEEP_CLI``, else as ``tensorkeep`` on ``PATH``; the
hook refuses to start without it rather than silently exporting nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
from typing import Optional

logger = logging.getLogger("tensorkeep")

CLI_ENV = "TENSORKEEP_CLI"
LOG_NAME = "tensorkeep-export.log"


def resolve_dir(export_tensorboard: bool, tensorboard_dir: Optional[str], trial: str) -> Optional[str]:
    """smdebug's rule: a tensorboard_dir alone also exports; export_tensorboard
    alone uses a default directory (smdebug's ``<out_dir>/tensorboard`` is not a
    directory for a ``tensorkeep://`` out_dir: ``./tensorboard/<trial>`` instead)."""
    if tensorboard_dir:
        return os.path.expanduser(tensorboard_dir)
    if export_tensorboard:
        return os.path.join("tensorboard", trial)
    return None


def find_cli() -> str:
    path = os.environ.get(CLI_ENV) or shutil.which("tensorkeep")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError(
            "export_tensorboard/tensorboard_dir need the tensorkeep command-line client "
            "(built with the collector, e.g. build/bin/tensorkeep): put it on PATH or set "
            f"{CLI_ENV} to its path"
            + (f" ({CLI_ENV}={os.environ[CLI_ENV]!r} is not an executable)" if os.environ.get(CLI_ENV) else "")
        )
    return path


class TensorBoardExport:
    """``tensorkeep export-tensorboard --follow`` running for one trial."""

    def __init__(self, target: str, trial: str, directory: str, security) -> None:
        cli = find_cli()
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.log_path = os.path.join(directory, LOG_NAME)
        env = dict(os.environ)
        for var, value in (
            ("TENSORKEEP_TLS_CA", security.tls_ca),
            ("TENSORKEEP_TLS_CERT", security.tls_cert),
            ("TENSORKEEP_TLS_KEY", security.tls_key),
            ("TENSORKEEP_TOKEN", security.token),
        ):
            if value:
                env[var] = value
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [cli, "--server", target, "export-tensorboard", trial, directory, "--follow"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                start_new_session=True,  # a Ctrl-C of the training reaches it through close()
            )
        logger.info("tensorkeep: exporting trial %s to TensorBoard in %s (pid %d)", trial, directory, self.process.pid)

    def close(self, trial_ends: bool, timeout: Optional[float]) -> None:
        """Waits for the exporter to write the last steps and exit at the trial's
        end. When this process's close does not end the trial (other workers still
        train), the exporter is left running: it exits when the trial ends."""
        if self.process.poll() is None:
            if not trial_ends:
                logger.info(
                    "tensorkeep: the TensorBoard export (pid %d) goes on until the trial ends",
                    self.process.pid,
                )
                return
            try:
                self.process.wait(timeout=60.0 if timeout is None else max(timeout, 1.0))
            except subprocess.TimeoutExpired:
                # The trial did not end (the close failed?): stop it cleanly.
                self.process.send_signal(signal.SIGINT)
                try:
                    self.process.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        if self.process.returncode not in (0, None):
            try:
                with open(self.log_path, "r", errors="replace") as f:
                    tail = f.read()[-2000:]
            except OSError:
                tail = ""
            logger.warning(
                "tensorkeep: the TensorBoard export exited with status %s: %s",
                self.process.returncode,
                tail.strip(),
            )
