"""Checks that may crash the process run in a child ``python -m dlpx.conform._child``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def run_isolated(probe: str, spec: str, timeout: float = 120) -> str:
    """Run `probe` on an array from the factory `spec` in a child; 'ok', the child's answer,
    or how it died."""
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    try:
        done = subprocess.run([sys.executable, "-m", "dlpx.conform._child", probe, spec], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"child timed out after {timeout:.0f} s"
    if done.returncode < 0:
        return f"crashed the process ({signal.Signals(-done.returncode).name})"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"child failed (rc {done.returncode}): {(done.stderr.strip().splitlines() or ['?'])[-1][:90]}"
    return lines[-1]
