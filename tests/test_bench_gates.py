"""The recipe's gates fail a run through both front doors: ``specrig bench`` exits 11 and
``pytest bench/`` by hand fails its session, from the one judgement in ``lab.summary``.

Both attach (``--endpoint``) to the synthetic SSE server in a process of its own, streaming
slower than the cpu recipe's decode floor (``min_decode_tok_s = 4``): about 2.9 tok/s. The
same by-hand run against a fast server passes, so the failure is the gate's. A few seconds
each (no engine, no model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specrig.lab.folder import incomplete
from specrig.recipe.schema import load_recipe
from specrig.serve.synthetic import Behaviour, serve_in_process

ROOT = Path(__file__).resolve().parents[1]
# 3 tokens, 0.35 s apart: 2 decode intervals in 0.7 s, about 2.9 tok/s
BELOW_FLOOR = Behaviour(token_delay_s=0.35)
FAST = Behaviour(token_delay_s=0.001)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with serve_in_process(BELOW_FLOOR) as slow, serve_in_process(FAST) as fast:
        yield {"slow": slow.base_url, "fast": fast.base_url}


def _env(tmp_path: Path) -> dict[str, str]:
    return os.environ | {"SPECRIG_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}


COMMON = ["--memory-bandwidth", "10", "--max-tokens", "3", "--warmup", "0"]


def by_hand(tmp_path: Path, endpoint: str, results: Path) -> subprocess.CompletedProcess[str]:
    specrig = [f"--specrig-{a.removeprefix('--')}" if a.startswith("--") else a for a in COMMON]
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "bench" / "test_decode.py"), "-p", "no:cacheprovider", "-q"]
    cmd += ["--rootdir", str(ROOT / "bench"), "-o", "addopts=", "-o", "testpaths="]
    cmd += ["--specrig-recipe", "cpu", "--specrig-endpoint", endpoint, "--specrig-results", str(results), *specrig]
    cmd += [f"--benchmark-storage=file://{tmp_path / 'storage'}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(tmp_path))


def test_the_floor_is_the_recipes() -> None:
    assert load_recipe("cpu").bench.min_decode_tok_s == 4.0  # what BELOW_FLOOR is made to miss


def test_the_cli_exits_11_on_a_gate(tmp_path: Path, servers: dict[str, str]) -> None:
    results = tmp_path / "run"
    cmd = [sys.executable, "-m", "specrig.cli", "bench", "--recipe", "cpu", "--endpoint", servers["slow"]]
    proc = subprocess.run(
        cmd + COMMON + ["--results", str(results)], capture_output=True, text=True, timeout=300, env=_env(tmp_path)
    )
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "the run does not meet its gates" in said and "baseline: decode_tok_s" in said
    assert "Traceback" not in proc.stdout + proc.stderr


def test_pytest_by_hand_fails_on_the_same_gate(tmp_path: Path, servers: dict[str, str]) -> None:
    slow = by_hand(tmp_path, servers["slow"], tmp_path / "slow")
    out = slow.stdout + slow.stderr
    assert slow.returncode == 1, out[-4000:]
    assert "1 passed" in slow.stdout  # every test passed: the session failed on the gate
    assert "specrig: gate not met: baseline: decode_tok_s" in out
    summary = json.loads((tmp_path / "slow" / "summary.json").read_text())
    [gate] = [t for c in summary["configs"] for t in c["thresholds"]]
    assert gate["name"] == "decode_tok_s" and gate["threshold"] == 4.0 and gate["measured"] < 4.0 * (1 - 0.10)
    assert incomplete(tmp_path / "slow") is None  # a run that missed a gate is a whole run

    fast = by_hand(tmp_path, servers["fast"], tmp_path / "fast")
    assert fast.returncode == 0, (fast.stdout + fast.stderr)[-4000:]
    assert "gate not met" not in fast.stdout + fast.stderr
