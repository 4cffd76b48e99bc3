"""Reports: table, markdown, PNGs, side-by-side runs and regression gating."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specrig.report import find_previous_run, markdown_table, regressions, table_rows, write_report


def _config(name: str, tok_s: float, acc: float | None = None) -> dict:
    requests = [{"prompt_id": p, "decode_tok_s": tok_s + i} for i, p in enumerate(["relativity", "n_queens", "primes"])]
    doc = {
        "name": name,
        "aggregate": {"decode_tok_s_mean": tok_s + 1, "decode_tok_s_min": tok_s, "decode_tok_s_max": tok_s + 2,
                      "ttft_s_median": 0.2, "tpot_ms_median": 1000 / tok_s, "completion_tokens": 96},
        "requests": requests,
        "thresholds": [{"name": "decode_tok_s", "measured": tok_s, "threshold": 5.0, "tolerance": 0.1,
                        "informational": False, "floor": 4.5, "passed": tok_s >= 4.5}],
    }  # fmt: skip
    if acc is not None:
        doc["spec_stats"] = {"k": 4, "acceptance_rate": acc, "mean_acceptance_length": 1 + 4 * acc, "drafts": 10,
                             "draft_tokens": 40, "accepted_tokens": 40 * acc, "a": acc, "a_source": "p_0",
                             "per_position": [acc, acc * acc, acc**3, acc**4], "theoretical_tokens_per_step": 2.0,
                             "predicted_speedup": 0.9, "measured_speedup": 0.8, "break_even_a": 0.7, "source": "test"}  # fmt: skip
        doc["speedup"] = 0.8
        doc["diagnosis"] = "acceptance test line"
    return doc


def _summary(created: str, base: float, acc: float) -> dict:
    return {"created": created, "recipe": "cpu", "engine": "vllm", "model": "m", "host": {"cpus": 2, "gpus": []},
            "workload": {"max_tokens": 32, "concurrency": 1}, "timings": {"bench_s": 10.0},
            "configs": [_config("baseline", base), _config("ngram", base * 0.8, acc)]}  # fmt: skip


def test_write_report_and_table(tmp_path: Path) -> None:
    s = _summary("2026-11-29T10:00:00", 10.0, 0.5)
    write_report(tmp_path, s)
    assert (tmp_path / "throughput.png").stat().st_size > 5000 and (tmp_path / "acceptance.png").stat().st_size > 5000
    md = (tmp_path / "report.md").read_text()
    assert "| baseline | 11.0 | 10.0–12.0 |" in md and "acceptance test line" in md and "50.0%" in md
    rows = table_rows(s)
    assert rows[1][0] == "ngram (k=4)" and rows[1][8] == "0.80x"
    assert markdown_table(rows).count("\n") == 3


def test_regression_against_an_earlier_run(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for d, s in ((old, _summary("2026-11-28T10:00:00", 10.0, 0.5)), (new, _summary("2026-11-29T10:00:00", 7.0, 0.3))):
        d.mkdir()
        (d / "summary.json").write_text(json.dumps(s))
    assert find_previous_run(new, "cpu", "vllm") == old
    found = regressions(json.loads((new / "summary.json").read_text()), old, 0.10)
    assert any("baseline: decode tok/s regressed from 11 to 8" in f for f in found)
    assert any("ngram: acceptance regressed from 0.5 to 0.3" in f for f in found)
    assert regressions(json.loads((new / "summary.json").read_text()), old, 0.5) == []


def test_report_command_side_by_side(tmp_path: Path) -> None:
    runs = []
    for i, tok in enumerate((10.0, 20.0)):
        d = tmp_path / f"run{i}"
        d.mkdir()
        (d / "summary.json").write_text(json.dumps(_summary(f"2026-11-2{i}T00:00:00", tok, 0.5)))
        runs.append(str(d))
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "specrig.cli", "report", *runs, "--out", str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (out / "compare.md").read_text().count("run0") >= 2 and (out / "throughput.png").exists()
    bad = subprocess.run([sys.executable, "-m", "specrig.cli", "report", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 2 and "holds no summary.json" in bad.stderr
