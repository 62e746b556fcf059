"""Start K local processes of a script the way torchrun does (gloo, a free port), with a hard
timeout, for the data-parallel tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ranks:
    returncodes: list[int | None]
    stderr: list[str]
    seconds: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script: Path, args: list[str], world: int = 2, timeout: float = 120.0) -> Ranks:
    """Run ``script args`` as ``world`` ranks; kill them all after ``timeout`` seconds."""
    port = free_port()
    procs = []
    start = time.perf_counter()
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), *args],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    errors = []
    for p in procs:
        left = max(1.0, timeout - (time.perf_counter() - start))
        try:
            _, err = p.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            _, err = p.communicate()
            err = f"(killed after {timeout} s)\n{err}"
        errors.append(err)
    return Ranks([p.returncode for p in procs], errors, time.perf_counter() - start)
