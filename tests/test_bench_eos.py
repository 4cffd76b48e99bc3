"""``--stop-at-eos``: answers end at the model's end of sequence, as chat traffic does, instead
of every answer running ``--max-tokens`` long with EOS ignored (the story's way, the default).

A real ``specrig bench`` attaches (``--endpoint``) to the synthetic SSE server, which ends an
answer after 3 tokens (finish reason ``stop``) when a request does not ask ``ignore_eos``.
A few seconds each (no engine, no model)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specrig.lab.results import load_summary
from specrig.serve.synthetic import Behaviour, serve_in_process

EOS_AFTER = 3
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve_in_process(Behaviour(token_delay_s=0.001, eos_after=EOS_AFTER)) as s:
        yield s.base_url


def bench(tmp_path: Path, endpoint: str, name: str, *extra: str) -> Path:
    results = tmp_path / name
    cmd = [sys.executable, "-m", "specrig.cli", "bench", "--recipe", "cpu", "--endpoint", endpoint, "--warmup", "0"]
    cmd += ["--memory-bandwidth", "10", "--max-tokens", str(MAX_TOKENS), "--results", str(results), *extra]
    env = os.environ | {"SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return results


def test_answers_stop_at_eos_only_when_asked(tmp_path: Path, server: str) -> None:
    ignored = load_summary(bench(tmp_path, server, "ignored"))
    [m] = ignored.measurements
    assert not ignored.workload.stop_at_eos and {r.completion_tokens for r in m.requests} == {MAX_TOKENS}

    stopped = load_summary(bench(tmp_path, server, "stopped", "--stop-at-eos"))
    [m] = stopped.measurements
    assert stopped.workload.stop_at_eos and "(to EOS)" in stopped.workload.describe()
    assert {r.completion_tokens for r in m.requests} == {EOS_AFTER} and m.completion_tokens == 5 * EOS_AFTER
