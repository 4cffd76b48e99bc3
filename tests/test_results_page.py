"""The results page (``specrig results``): docs/results.md is what the studies' results.toml files
and their captures give, byte for byte; a bad results.toml or a missing capture is refused naming
the file and the key; each kind of table read from a real capture (a study's record, read from its
capture folder): what each column shows, not which figures (those are each study's replay's)."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from specrig.cli import main
from specrig.core.errors import ConfigError
from specrig.lab.results import RunSummary
from specrig.model.offline import OfflineEval
from specrig.report.projection import STORY, host_rows, one_gpu_rows, project
from specrig.report.render import THROUGHPUT_COLUMNS, throughput_rows
from specrig.report.results_file import Capture, Located, Table
from specrig.report.results_page import first_difference, render_page
from specrig.report.results_tables import BENCH_COLUMNS, bench, build, offline, projection

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
    """The page depends on the files only: a copy of studies/ (their captures in it) gives the same page."""
    shutil.copytree(STUDIES, tmp_path / "studies")
    (tmp_path / "docs").mkdir()
    assert render_page(tmp_path / "studies", tmp_path / "docs" / "results.md") == PAGE.read_text()


# the table kinds, each on a real capture of a study (which figures they give: the study's replay)

TRAIN = "studies/2026-12-06-training-budget/capture"  # a chat bench and three offline evaluations
SERVED = "eagle3-eagle3-14e01f80cd5eaf7d-k3"  # its served drafter
KIMI = "studies/2026-12-03-kimi-layers/capture"  # Kimi-K2.5 cut to 4 and 8 layers


def _at(rel: str, **fields) -> Located:
    """The capture at ``rel`` (its path in the checkout) as a study's results.toml names it."""
    file = ROOT / rel
    cap = Capture(path=os.path.relpath(file, STUDIES / "2026-12-06-some-study"), **fields)
    return Located(cap, file, os.path.relpath(file, ROOT / "docs"), "table.0.captures.0", Path("results.toml"))


def _summary(rel: str) -> RunSummary:
    return RunSummary.model_validate_json(gzip.decompress((ROOT / rel).read_bytes()))


def _table(kind: str, **fields) -> Table:
    return Table(kind=kind, caption="c", captures=[Capture(path="x")], **fields)


def _rows(lines: list[str]) -> list[list[str]]:
    """The cells of the first markdown table in ``lines``."""
    table = lines[0].splitlines()
    return [[c.strip() for c in row.strip("|").split("|")] for row in table[2:]]


def test_bench_is_the_reports_table_of_speed_and_speculation():
    """A chat bench's summary: the report's own throughput table (``specrig report``) cut to the columns
    of speed and speculation, one row per configuration and load, the configuration shown under the
    name asked with its k; the line under the table names the run's engine, host and workload."""
    rel = f"{TRAIN}/chat-summary.json.gz"
    lines = bench(_table("bench"), [_at(rel, configs={SERVED: "eagle3 300 s"})])
    assert lines[0].splitlines()[0] == "| config | load | decode tok/s | accept | mean len | speedup | lossless |"
    s = _summary(rel)
    pick = [THROUGHPUT_COLUMNS.index(col) for col in BENCH_COLUMNS]
    assert _rows(lines) == [[r[i] for i in pick] for r in throughput_rows(s, "", {SERVED: "eagle3 300 s"})]
    loads = sorted({m.point.label for m in s.measurements})
    assert [r[:2] for r in _rows(lines)] == [[c, n] for c in ("baseline", "eagle3 300 s (k=3)") for n in loads]
    gpus = f"{len(s.host.gpus)} x {s.host.gpus[0].name}"
    assert lines[-1].endswith(
        f"({os.path.relpath(ROOT / rel, ROOT / 'docs')}): {s.engine} on {gpus}; {s.workload.describe()}"
    )


def test_bench_shows_the_interval_over_repeats_and_labels_each_run():
    """Two repeats (SpecForge's study) give each speedup its interval, one repeat (SGLang's oracle) none;
    a labelled run's rows start with its label."""
    two = _at("studies/2026-12-06-specforge/capture-h200-specforge/chat-summary.json.gz", label="H200")
    one = _at("studies/2026-12-02-sglang-h200/capture/sglang-oracle-deterministic.summary.json.gz")
    rows = _rows(bench(_table("bench"), [two, one]))
    labelled = [r for r in rows if r[0].startswith("H200: ")]
    assert labelled == rows[: len(labelled)] and len(rows) > len(labelled) > 0
    speedups = [(r in labelled, r[5]) for r in rows if r[5] != "–"]
    assert {repeats for repeats, _ in speedups} == {True, False}
    for repeats, cell in speedups:
        assert re.fullmatch(r"\d+\.\d\dx \[\d+\.\d\d–\d+\.\d\d\]" if repeats else r"\d+\.\d\dx", cell), cell


def test_bench_refuses_a_name_for_a_configuration_the_run_does_not_hold():
    at = _at(f"{TRAIN}/chat-summary.json.gz", configs={"eagle3-k9": "x"})
    with pytest.raises(ConfigError, match=r"table.0.captures.0.configs: eagle3-k9 is no configuration") as e:
        bench(_table("bench"), [at])
    assert SERVED in e.value.hint


def test_offline_per_position_and_mean_length_at_k():
    """Each drafter's evaluation: its per-position rates to k, the mean length 1 + their sum, its walk
    at k (as the engine drafts), and the same on the bench's prompts; at k=3 three positions."""
    names = ("default", "bucket64", "train300")
    ats = [_at(f"{TRAIN}/{n}-offline_eval.json", label=n) for n in names]
    evals = [OfflineEval.model_validate_json((ROOT / TRAIN / f"{n}-offline_eval.json").read_text()) for n in names]
    for k in (4, 3):
        rows = _rows(offline(_table("offline", k=k), ats))
        for row, name, o in zip(rows, names, evals, strict=True):
            per, story = o.per_position[:k], o.bench_prompts["per_position"][:k]
            assert row == [
                name,
                str(k),
                " / ".join(f"{x:.2f}" for x in per),
                f"{1 + sum(per):.2f}",
                f"{o.walk[str(k)]['mean_acceptance_length']:.2f}",
                f"{1 + sum(story):.2f} ({o.bench_prompts['dataset']})",
            ]


def test_offline_reads_a_curve_one_row_per_point():
    """A data-size curve (curve.json): one row per point, named by its samples in their order, each
    its point's evaluation."""
    rel = "studies/2026-12-05-data-curve/capture-h200-curve/curve.json"
    points = sorted(json.loads((ROOT / rel).read_text())["points"], key=lambda p: p["samples"])
    rows = _rows(offline(_table("offline"), [_at(rel)]))
    assert [r[0] for r in rows] == [f"{p['samples']:,} samples" for p in points] and len(points) > 1
    assert [r[3] for r in rows] == [f"{1 + sum(p['offline']['per_position']):.2f}" for p in points]


def test_projection_is_specrig_projects():
    """Two runs cut to 4 and 8 layers: the page's text and tables are ``specrig project``'s projection
    of them, on one GPU and on the story's host; one layer count is refused by name."""
    ats = [_at(f"{KIMI}/kimi-4l.summary.json.gz", layers=4), _at(f"{KIMI}/kimi-8l.summary.json.gz", layers=8)]
    p = project(
        [(4, _summary(f"{KIMI}/kimi-4l.summary.json.gz")), (8, _summary(f"{KIMI}/kimi-8l.summary.json.gz"))],
        target_layers=STORY.layers,
    )
    lines = projection(_table("projection"), ats)
    assert (
        f"{p.per_layer_ms:.3f} ms a layer" in lines[0]
        and f"{p.plain_ms:.2f} ms at {p.target_layers} layers" in lines[0]
    )
    assert _rows(lines[2:]) == one_gpu_rows(p)
    host = next(i for i, line in enumerate(lines) if line.startswith("On the story's host"))
    assert f"a speculative step {p.host_measured_cost:.2f}x a plain one" in lines[host]
    assert _rows(lines[host + 2 :]) == host_rows(p)
    with pytest.raises(ConfigError, match=r"results.toml: table.0.captures: a projection needs baselines at two"):
        projection(_table("projection"), ats[:1])


def test_build_time_jobs_and_peak_memory():
    """A wheelhouse manifest a row: the wheel's name and version (or its label), its archs, the
    watchdog's time in minutes and seconds, the jobs, the compile jobs seen, the peaks a job and in all."""
    rels = [
        "studies/2026-12-03-flash-attn-h200/capture/manifest.json",
        "studies/2026-12-04-sm120-cross-builds/capture/flash-attn.manifest.json",
    ]
    rows = _rows(build(_table("build"), [_at(rels[0]), _at(rels[1], label="sm_120 build")]))
    for row, rel, label in zip(rows, rels, (None, "sm_120 build"), strict=True):
        m = json.loads((ROOT / rel).read_text())
        b, seconds = m["build"], round(m["build"]["seconds"])
        assert row == [
            label or f"{m['inputs']['name']} {m['filename'].split('-')[1]}",
            ", ".join(f"sm_{a}" for a in m["inputs"]["archs"]),
            f"{seconds // 60} min {seconds % 60:02d} s",
            str(b["jobs"]),
            str(b["compile_jobs_seen"]),
            f"{b['peak_job_gb']:.2f}",
            f"{b['peak_total_gb']:.1f}",
        ]
