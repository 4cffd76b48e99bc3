"""The results page (``specrig results``): docs/results.md is what the studies' results.toml files
and their captures give, byte for byte; a bad results.toml or a missing capture is refused naming
the file and the key; each kind of table read from real captures (tests/fixtures/)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from specrig.cli import main
from specrig.core.errors import ConfigError
from specrig.report.results_file import Capture, Located, Table
from specrig.report.results_page import first_difference, render_page
from specrig.report.results_tables import bench, build, offline, projection

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"
PAGE = ROOT / "docs" / "results.md"
FIX = "../../checkout"  # from a made-up studies/NAME in tmp_path: the checkout, linked beside it
FLASH = "studies/2026-12-03-flash-attn-h200/capture/manifest.json"  # a build capture


def test_the_committed_page_is_what_the_captures_give(capsys):
    """Made again from the committed results.toml files and captures, the page is the committed bytes
    (run `specrig results` after changing either)."""
    assert render_page(STUDIES, PAGE).encode() == PAGE.read_bytes()
    assert main(["results", "--studies", str(STUDIES), "--out", str(PAGE), "--check"]) == 0
    assert "is what the captures give" in capsys.readouterr().err


def test_the_page_holds_no_path_of_this_machine_and_no_date_of_its_making(tmp_path, monkeypatch):
    """Links are relative to the page, whatever the working folder and however the folders are named."""
    text = PAGE.read_text()
    assert str(ROOT) not in text and "/home/" not in text and "~/" not in text
    assert text.startswith("# Results\n\n") and "`specrig results`" in text.splitlines()[2]
    monkeypatch.chdir(ROOT / "docs")
    assert render_page(Path("../studies"), Path("results.md")) == text
    # every study with a results.toml has its section, in the order of the folders' names
    names = [p.parent.name for p in sorted(STUDIES.glob("*/results.toml"))]
    found = [line.rsplit("[", 1)[1].split("]")[0] for line in text.splitlines() if " · study: [" in line]
    assert found == names and len(names) >= 10


def _study(tmp_path: Path, body: str, name: str = "2026-12-06-some-study") -> Path:
    """A studies folder holding one study whose results.toml is ``body`` (its paths reach the real
    captures through ``FIX``, the checkout linked as tmp_path/checkout)."""
    studies = tmp_path / "studies"
    (studies / name).mkdir(parents=True)
    (studies / name / "results.toml").write_text(body)
    (tmp_path / "checkout").symlink_to(ROOT)
    return studies


GOOD = f"""
title = "A study"
host = "1 x H100"

[[table]]
kind = "build"
caption = "A build"
captures = [{{ path = "{FIX}/{FLASH}" }}]
"""


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (GOOD.replace("caption =", "captions ="), ["table.0.captions: unknown key; did you mean 'table.0.caption'?"]),
        (GOOD.replace('"build"', '"plot"'), ["table.0.kind:", "'bench', 'offline', 'projection' or 'build'"]),
        (GOOD.replace('title = "A study"\n', ""), ["title: required key is missing"]),
        (GOOD.replace('manifest.json" }', 'manifest.json", layers = 4 }'), ["table.0.captures.0.layers: only a"]),
        (GOOD.replace('kind = "build"', 'kind = "projection"'), ["table.0.captures.0.layers: required key"]),
        (GOOD.replace(f'"{FIX}', '"/abs'), ["table.0.captures.0.path: a path relative to the study's folder"]),
        (GOOD.replace('"A build"', '"two\\nlines"'), ["table.0.caption: one line of text"]),
        (GOOD.replace("[[table]]", "[[table]"), ["is not TOML"]),
    ],
    ids=["typo", "kind", "missing", "layers-on-build", "no-layers", "absolute", "two-lines", "toml"],
)
def test_a_bad_results_file_is_refused_naming_the_key(tmp_path, capsys, body, said):
    studies = _study(tmp_path, body)
    out = tmp_path / "docs" / "results.md"
    assert main(["results", "--studies", str(studies), "--out", str(out)]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "results.toml" in err and "Traceback" not in err
    for s in said:
        assert " ".join(s.split()) in " ".join(err.split()), err
    assert not out.exists()


def test_a_missing_capture_is_named(tmp_path, capsys):
    studies = _study(tmp_path, GOOD.replace("manifest.json", "nope.json"))
    out = tmp_path / "results.md"
    assert main(["results", "--studies", str(studies), "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "2026-12-06-some-study/results.toml: table.0.captures.0.path:" in err
    assert f"{FIX}/{FLASH}".replace("manifest", "nope") + " does not exist" in err and not out.exists()


def test_a_capture_of_another_kind_is_named(tmp_path, capsys):
    """A drafter's offline evaluation given to a bench table: the file and the summary's first missing key."""
    body = GOOD.replace('"build"', '"bench"').replace(
        FLASH, "studies/2026-12-06-training-budget/capture/train300-offline_eval.json"
    )
    studies = _study(tmp_path, body)
    assert main(["results", "--studies", str(studies), "--out", str(tmp_path / "r.md")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "train300-offline_eval.json is not a bench summary (summary.json) this specrig reads" in err


def test_check_names_the_first_line_that_differs(tmp_path, capsys):
    studies = _study(tmp_path, GOOD)
    out = tmp_path / "docs" / "results.md"
    args = ["results", "--studies", str(studies), "--out", str(out)]
    assert main([*args, "--check"]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(args) == 0
    assert main([*args, "--check"]) == 0
    lines = out.read_text().splitlines(keepends=True)
    lines[8] = "edited by hand\n"
    out.write_text("".join(lines))
    assert main([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "first at line 9" in err and "edited by hand" in err
    assert out.read_text().splitlines()[8] == "edited by hand"  # --check writes nothing


def test_first_difference():
    assert first_difference("a\nb\n", "a\nb\n") is None
    assert first_difference("a\nx\n", "a\nb\n").startswith("line 2: the page has\n    x")
    assert "line 2: the page ends" in first_difference("a\n", "a\nb\n")
    assert "line 2: the page goes on" in first_difference("a\nb\n", "a\n")
    assert "final newline" in first_difference("a\nb", "a\nb\n")


def test_the_committed_studies_read_when_the_folder_is_copied(tmp_path):
    """The page depends on the files only: a copy of studies/ beside a link to tests/ gives the same page."""
    shutil.copytree(STUDIES, tmp_path / "studies")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "docs").mkdir()
    assert render_page(tmp_path / "studies", tmp_path / "docs" / "results.md") == PAGE.read_text()


# the table kinds on real captures


def _at(rel: str, **fields) -> Located:
    """The capture at ``rel`` (its path in the checkout) as a study's results.toml names it."""
    file = ROOT / rel
    cap = Capture(path=os.path.relpath(file, STUDIES / "2026-12-06-some-study"), **fields)
    return Located(cap, file, os.path.relpath(file, ROOT / "docs"), "table.0.captures.0", Path("results.toml"))


def _table(kind: str, **fields) -> Table:
    return Table(kind=kind, caption="c", captures=[Capture(path="x")], **fields)


def _rows(lines: list[str]) -> list[list[str]]:
    """The cells of the first markdown table in ``lines``."""
    table = lines[0].splitlines()
    return [[c.strip() for c in row.strip("|").split("|")] for row in table[2:]]


def test_bench_is_the_reports_table_of_speed_and_speculation():
    """The 300 s drafter on chat (studies/2026-12-06-training-budget/capture): the report's own figures, the
    configuration shown under the name asked, the baseline's decode rate beside it."""
    at = _at(
        "studies/2026-12-06-training-budget/capture/chat-summary.json.gz",
        configs={"eagle3-eagle3-14e01f80cd5eaf7d-k3": "eagle3 300 s"},
    )
    lines = bench(_table("bench"), [at])
    assert lines[0].splitlines()[0] == "| config | load | decode tok/s | accept | mean len | speedup | lossless |"
    assert _rows(lines) == [
        ["baseline", "c1", "465.2", "–", "–", "–", "–"],
        ["baseline", "c8", "364.0", "–", "–", "–", "–"],
        ["eagle3 300 s (k=3)", "c1", "697.1", "59.8%", "2.79", "1.50x", "24/24"],
        ["eagle3 300 s (k=3)", "c8", "494.2", "59.2%", "2.78", "1.36x", "16/24 ties"],
    ]
    assert lines[-1].endswith(
        "vllm on 1 x NVIDIA H100 80GB HBM3; 24 sharegpt prompts as chat messages x 512 (to EOS) tokens; "
        "concurrency 1, concurrency 8"
    )


def test_bench_shows_the_interval_over_repeats_and_labels_each_run():
    """SpecForge beside specrig, two repeats: each speedup with its interval; two runs' rows by label."""
    spec = _at("studies/2026-12-06-specforge/capture-h200-specforge/chat-summary.json.gz", label="H200")
    rows = _rows(
        bench(
            _table("bench"),
            [spec, _at("studies/2026-12-02-sglang-h200/capture/sglang-oracle-deterministic.summary.json.gz")],
        )
    )
    assert rows[2][:2] == ["H200: eagle3-trained-k3", "c1"] and rows[2][5] == "1.25x [0.47–3.29]"
    assert rows[-1] == ["draft_model (k=4)", "c1", "346.9", "93.1%", "4.72", "0.81x", "0/5 ties"]


def test_bench_refuses_a_name_for_a_configuration_the_run_does_not_hold():
    at = _at("studies/2026-12-06-training-budget/capture/chat-summary.json.gz", configs={"eagle3-k9": "x"})
    with pytest.raises(ConfigError, match=r"table.0.captures.0.configs: eagle3-k9 is no configuration") as e:
        bench(_table("bench"), [at])
    assert "eagle3-eagle3-14e01f80cd5eaf7d-k3" in e.value.hint


def test_offline_per_position_and_mean_length_at_k():
    """The training budget's drafters: 3.11, 3.36 and 3.44 at k=4 (the study's figures); at k=3 the mean
    length counts three positions and the walk is the engine's at k=3."""
    ats = [
        _at(f"studies/2026-12-06-training-budget/capture/{n}-offline_eval.json", label=n)
        for n in ("default", "bucket64", "train300")
    ]
    rows = _rows(offline(_table("offline", k=4), ats))
    assert [r[3] for r in rows] == ["3.11", "3.36", "3.44"]
    assert rows[2] == ["train300", "4", "0.78 / 0.64 / 0.54 / 0.48", "3.44", "2.96", "2.82 (story)"]
    assert _rows(offline(_table("offline", k=3), ats[2:]))[0][1:5] == ["3", "0.78 / 0.64 / 0.54", "2.96", "2.68"]


def test_offline_reads_a_curve_one_row_per_point():
    """The data-size curve (studies/2026-12-05-data-curve/capture-h200-curve/curve.json): 1.79, 3.20, 3.14, 3.14 at k=4; at
    k=3 as served 1.60, 2.50, 2.42, 2.43 (the study's table)."""
    at = _at("studies/2026-12-05-data-curve/capture-h200-curve/curve.json")
    rows = _rows(offline(_table("offline"), [at]))
    assert [r[0] for r in rows] == ["1,000 samples", "4,000 samples", "16,000 samples", "20,000 samples"]
    assert [r[3] for r in rows] == ["1.79", "3.20", "3.14", "3.14"]
    assert [r[4] for r in _rows(offline(_table("offline", k=3), [at]))] == ["1.60", "2.50", "2.42", "2.43"]


def test_projection_of_the_kimi_runs():
    """Kimi-K2.5 cut to 4 and 8 layers: 0.092 ms a layer, 7.29 ms at 61; on the story's host 1.44x
    projected at k=5 against the 2.64x measured there (studies/2026-12-03-kimi-layers/test_replay.py's figures)."""
    ats = [
        _at("studies/2026-12-03-kimi-layers/capture/kimi-4l.summary.json.gz", layers=4),
        _at("studies/2026-12-03-kimi-layers/capture/kimi-8l.summary.json.gz", layers=8),
    ]
    lines = projection(_table("projection"), ats)
    assert "0.092 ms a layer" in lines[0] and "7.29 ms at 61 layers" in lines[0]
    one_gpu = _rows(lines[2:])
    assert [r[5] for r in one_gpu] == ["1.34x", "1.45x", "1.54x", "1.63x", "1.73x"]
    host = next(i for i, line in enumerate(lines) if line.startswith("On the story's host"))
    assert "a speculative step 2.64x a plain one" in lines[host]
    assert _rows(lines[host + 2 :])[-1][:3] == ["5", "17.41", "1.44x"]
    with pytest.raises(ConfigError, match=r"results.toml: table.0.captures: a projection needs baselines at two"):
        projection(_table("projection"), ats[:1])


def test_build_time_jobs_and_peak_memory():
    """flash-attn 2.8.3 on the H200 host: 19 min 56 s at 14 jobs, 6.56 GiB a job (the study's figures);
    its sm_120 cross-build beside it."""
    ats = [
        _at("studies/2026-12-03-flash-attn-h200/capture/manifest.json"),
        _at("studies/2026-12-04-sm120-cross-builds/capture/flash-attn.manifest.json", label="sm_120 build"),
    ]
    rows = _rows(build(_table("build"), ats))
    assert rows == [
        ["flash-attn 2.8.3+sm90.cu130.torch2110", "sm_90", "19 min 56 s", "14", "73", "6.56", "60.1"],
        ["sm_120 build", "sm_120", "14 min 50 s", "14", "73", "6.60", "60.3"],
    ]
