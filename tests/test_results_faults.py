"""Nothing lost where results are written, and every OS error named:

* every place a run writes is checked before anything is prepared (a folder, or one that can be
  made; writable; not read-only; some free space), creating nothing;
* a results folder is marked INCOMPLETE from its making until its summary is written, and
  ``specrig report`` / ``--baseline`` / ``--compare`` go by the marker;
* a summary that cannot be written (a full disk, simulated here) is kept elsewhere and named;
* no plot with nothing to show (and no matplotlib warning); a stall names the requests sent.

The same faults end to end (a real bench against the synthetic server, real pytest-benchmark
storage and comparison) are in tests/test_bench_compare.py."""

from __future__ import annotations

import errno
import json
import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from client_support import run_openai
from specrig.cli import main
from specrig.core import atomic
from specrig.core.errors import BenchError, ConfigError, HostError
from specrig.core.prompt import Prompt
from specrig.lab.folder import INCOMPLETE, incomplete, mark_complete, open_results, results_folder
from specrig.lab.history import compared_run
from specrig.lab.plan import BenchPlan, ConfigPlan
from specrig.lab.plugin import SpecrigPlugin
from specrig.lab.results import HostInfo, RunSummary, Workload, load_summary
from specrig.report.render import write_report
from specrig.serve.synthetic import Behaviour, serve_in_thread

FIX = "name another folder"


def _every_disk_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.statvfs`` says every filesystem is mounted read-only (its free space as it is)."""
    real = os.statvfs

    def read_only(path: object) -> object:
        st = real(path)  # type: ignore[arg-type]
        return SimpleNamespace(f_flag=st.f_flag | os.ST_RDONLY, f_bavail=st.f_bavail, f_frsize=st.f_frsize)

    monkeypatch.setattr(os, "statvfs", read_only)


# ------------------------------------------------------------------ checked up front, creating nothing


def test_a_file_where_the_results_folder_should_be_is_named(tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(ConfigError, match=r"a-file is not a folder") as ei:
        atomic.check_folder(f, what="the results folder", fix=FIX)
    assert ei.value.exit_code == 2 and ei.value.hint == f"move {f} away, or {FIX}"
    with pytest.raises(ConfigError, match=rf"not a folder \({f} is a file\)"):
        results_folder(str(f / "run" / "deeper"), "unused")


def test_a_folder_that_can_be_made_is_checked_not_made(tmp_path: Path) -> None:
    want = tmp_path / "new" / "run"
    assert results_folder(str(want), "unused") == want.resolve()
    assert not (tmp_path / "new").exists()  # made only once the run is accepted (open_results)


def test_a_read_only_filesystem_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _every_disk_read_only(monkeypatch)
    with pytest.raises(HostError, match="is on a read-only filesystem") as ei:
        results_folder(str(tmp_path / "run"), "unused")
    assert ei.value.exit_code == 6


def test_too_little_free_space_is_refused_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(HostError, match=r"only .* free on the disk holding .* \(a run needs at least"):
        atomic.check_folder(tmp_path / "run", what="the results folder", fix=FIX, min_free=1 << 62)


@pytest.mark.parametrize(
    ("code", "cls", "words", "way_out"),
    [
        (errno.ENOSPC, HostError, "no space left on the disk holding /r", "free some space on that disk"),
        (
            errno.EROFS,
            HostError,
            "/r is on a read-only filesystem",
            "that filesystem is mounted read-only: remount it read-write",
        ),
        (errno.EACCES, ConfigError, "permission denied on /r", "give your user write permission there"),
        (errno.ENOTDIR, ConfigError, "/r is not a folder", ""),
    ],
)
def test_os_errors_specrig_can_name(code: int, cls: type, words: str, way_out: str) -> None:
    named = atomic.os_error(OSError(code, os.strerror(code)), "/r", "the results folder", FIX)
    assert type(named) is cls and words in named.message
    assert named.hint == (f"{way_out}, or {FIX}" if way_out else FIX)  # the way out of this cause, never another's
    assert atomic.os_error(OSError(errno.ECONNREFUSED, "refused"), "/r", "x", FIX) is None


def test_a_cache_that_is_a_file_or_read_only_is_named_not_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specrig.lab.history import storage_folder

    a_file = tmp_path / "cache-file"
    a_file.write_text("x")
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(a_file))
    with pytest.raises(ConfigError) as ei:
        storage_folder()
    assert ei.value.message == (
        f"the stored runs' folder (for --compare): {a_file / 'benchmarks'} is not a folder ({a_file} is a file)"
    )
    assert ei.value.hint == f"move {a_file} away, or point the cache at another folder: SPECRIG_CACHE_DIR=DIR"
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "cache"))
    _every_disk_read_only(monkeypatch)
    with pytest.raises(HostError, match="benchmarks is on a read-only filesystem") as ei:
        storage_folder()
    assert "free some space" not in str(ei.value) and "remount it read-write" in (ei.value.hint or "")

    def mkdir_read_only(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", mkdir_read_only)  # the cache folder not made yet, on a read-only disk
    monkeypatch.setenv("SPECRIG_CACHE_DIR", str(tmp_path / "new-cache"))
    with pytest.raises(HostError, match="new-cache/benchmarks is on a read-only filesystem") as ei:
        storage_folder()
    assert "free some space" not in str(ei.value)


def test_a_failed_atomic_write_names_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # a write to an open file names none

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as ei:
        atomic.write_text(tmp_path / "out" / "summary.json", "{}")
    assert ei.value.filename == str(tmp_path / "out" / "summary.json")
    assert list((tmp_path / "out").iterdir()) == []  # nothing half-written


def test_the_cli_names_an_os_error_instead_of_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    write_report(_folder(run), _summary())
    out = tmp_path / "a-file"
    out.write_text("x")
    assert main(["report", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the comparison's folder" in err and "is not a folder" in err and "Traceback" not in err


def test_any_os_error_specrig_can_name_ends_a_command_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import specrig.cli.report

    def read_only(args: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system", "/results/x")

    monkeypatch.setattr(specrig.cli.report, "run", read_only)
    assert main(["report", "anything"]) == 6
    err = capsys.readouterr().err
    assert "/results/x is on a read-only filesystem" in err and "Traceback" not in err


# ------------------------------------------------------------------ the INCOMPLETE marker


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _summary() -> RunSummary:
    return RunSummary(
        created="2026-12-02T00:00:00+0000",
        recipe="cpu",
        engine="vllm",
        model="m",
        served_name="m",
        lock_digest=None,
        host=HostInfo(cpus=2),
        workload=Workload(stall_timeout_s=60.0, first_token_timeout_s=60.0),
        configs=[],
        measurements=[],
    )


def test_a_folder_is_marked_until_its_summary_is_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    open_results(run)
    assert (run / "logs").is_dir() and incomplete(run) == "started, not finished: still running, or killed"
    with pytest.raises(ConfigError, match="is a run that did not finish .*: it holds no summary.json"):
        load_summary(run)  # what --baseline RUN_DIR says
    mark_complete(run)
    assert incomplete(run) is None and not (run / INCOMPLETE).exists()


def test_a_summary_cut_short_is_named_as_truncated_not_as_an_older_specrig(tmp_path: Path) -> None:
    run = _folder(tmp_path / "run")
    _summary().write(run / "summary.json")
    text = (run / "summary.json").read_text()
    (run / "summary.json").write_text(text[: len(text) // 2])  # a copy cut short
    with pytest.raises(ConfigError) as ei:
        load_summary(run)
    said = str(ei.value)
    assert f"{run / 'summary.json'} is truncated: the file ends at line " in said
    assert "older specrig" not in said and "cut short" in (ei.value.hint or "")
    (run / "summary.json").write_text('{"recipe": "cpu",, }')
    with pytest.raises(ConfigError, match=r"is not valid JSON: Expecting property name .* at line 1, column 18"):
        load_summary(run)
    (run / "summary.json").write_text("")
    with pytest.raises(ConfigError, match=r"summary.json is empty \(truncated, or never written\)"):
        load_summary(run)
    (run / "summary.json").write_text('{"recipe": "cpu"}')  # JSON, but not a summary: that is the older-specrig case
    with pytest.raises(ConfigError, match="is not a summary this specrig can read") as ei:
        load_summary(run)
    assert "older specrig" in (ei.value.hint or "")


def test_a_run_folder_that_does_not_exist_is_named_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        load_summary(tmp_path / "nowhere")
    assert ei.value.message == f"{tmp_path / 'nowhere'} does not exist"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ConfigError, match="a-file is a file, not a run's results folder"):
        load_summary(tmp_path / "a-file")
    with pytest.raises(ConfigError, match="holds no summary.json"):
        load_summary(_folder(tmp_path / "empty"))


def test_report_skips_a_run_that_did_not_finish(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    done, killed, out = tmp_path / "done", tmp_path / "killed", tmp_path / "cmp"
    write_report(_folder(done), _summary())
    open_results(killed)  # plan.json and no summary: a run that was killed
    assert main(["report", str(done), str(killed), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"skipped {killed}: a run that did not finish" in " ".join(err.split())
    assert f"`{killed}`: skipped, a run that did not finish" in (out / "compare.md").read_text()
    assert main(["report", str(killed), "--out", str(out)]) == 2
    assert "none of the runs given finished" in capsys.readouterr().err


def test_report_over_a_whole_results_folder_skips_what_is_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``specrig report results/*`` twice: the second listing holds the comparison the first wrote
    into the results folder; it is skipped, named, and the comparison's folder is named after the
    runs it shows, never one it skipped."""
    results = tmp_path / "results"
    monkeypatch.setenv("SPECRIG_RESULTS_DIR", str(results))
    write_report(_folder(results / "run-a"), _summary())
    write_report(_folder(results / "run-b"), _summary())
    open_results(results / "run-killed")  # plan.json and no summary

    def listing() -> list[str]:
        return [str(p) for p in sorted(results.iterdir())]

    assert main(["report", *listing()]) == 0
    made = results / "compare-run-a-vs-run-b"
    folders = ["compare-run-a-vs-run-b", "run-a", "run-b", "run-killed"]
    assert (made / "compare.md").is_file() and sorted(p.name for p in results.iterdir()) == folders
    capsys.readouterr()
    assert main(["report", *listing()]) == 0  # its own output is in the listing now
    err = " ".join(capsys.readouterr().err.split())
    assert f"skipped {made}: a comparison `specrig report` wrote, not a run" in err
    assert f"skipped {results / 'run-killed'}: a run that did not finish" in err
    assert sorted(p.name for p in results.iterdir()) == folders  # written in the same folder, no other
    md = (made / "compare.md").read_text()
    assert f"`{made}`: skipped, a comparison `specrig report` wrote" in md
    assert f"`{results / 'run-killed'}`: skipped, a run that did not finish" in md
    (results / "notes.txt").write_text("mine")
    empty = _folder(results / "empty")
    assert main(["report", str(made), str(empty), str(results / "notes.txt")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"skipped {empty}: not a run's results folder" in err and "notes.txt: a file" in err
    assert "no run among the 3 paths given" in err


# ------------------------------------------------------------------ the stored runs --compare means


def _stored(storage: Path, name: str, benchmarks: int, results: Path | None = None) -> Path:
    from pytest_benchmark.utils import get_machine_id

    f = storage / get_machine_id() / name
    f.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "machine_info": {"specrig": {"host": "UNSERIALIZABLE[HostInfo(cpus=2)]"}},  # as older specrig stored it
        "benchmarks": [{"fullname": f"t{i}", "stats": {"mean": 1.0}} for i in range(benchmarks)],
    }
    if results is not None:
        data["specrig_results"] = str(results)
    f.write_text(json.dumps(data))
    return f


def test_compare_latest_passes_over_runs_that_measured_nothing_or_did_not_finish(tmp_path: Path) -> None:
    storage = tmp_path / "benchmarks"
    with pytest.raises(ConfigError, match="--compare latest: no stored run to compare with"):
        compared_run(storage, "latest")
    good = _stored(storage, "0001_a.json", 1)
    unfinished = tmp_path / "unfinished"
    open_results(unfinished)
    _stored(storage, "0002_b.json", 1, results=unfinished)
    _stored(storage, "0003_c.json", 0)
    assert compared_run(storage, "latest") == compared_run(storage, True) == good.resolve()
    with pytest.raises(ConfigError, match=r"0003_c.json cannot be compared with: it measured nothing"):
        compared_run(storage, "3")
    with pytest.raises(ConfigError, match="is marked INCOMPLETE"):
        compared_run(storage, "0002")
    with pytest.raises(ConfigError, match="--compare 9: no such stored run"):
        compared_run(storage, "9")
    assert compared_run(storage, str(good)) == good.resolve()


# ------------------------------------------------------------------ a write that fails later keeps the figures


def _plan(results: Path) -> BenchPlan:
    return BenchPlan(
        startup_timeout_s=60.0,
        recipe="cpu",
        recipe_path="cpu.toml",
        engine="vllm",
        results_dir=str(results),
        configs=[ConfigPlan(name="baseline")],
        workload=Workload(stall_timeout_s=60.0, first_token_timeout_s=60.0),
        endpoint="http://127.0.0.1:9",
    )


def _full(results: Path, summary: RunSummary) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture(autouse=True)
def _temp_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary a full disk sends to a temporary folder goes below this test's own."""
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def test_a_full_disk_keeps_the_summary_elsewhere_and_says_where(tmp_path: Path) -> None:
    results = tmp_path / "run"
    open_results(results)
    plugin = SpecrigPlugin(_plan(results), write=_full)
    plugin.summary = _summary()
    assert plugin.finish({"bench_s": 1.0}) is plugin.summary
    err = plugin.write_error
    assert isinstance(err, HostError) and err.exit_code == 6
    assert f"no space left on the disk holding {results}" in err.message
    assert plugin.rescued is not None and f"the summary is written to {plugin.rescued} instead" in err.message
    assert RunSummary.model_validate_json(plugin.rescued.read_text()) == plugin.summary
    assert plugin.rescued.parent.parent == tmp_path / "tmp"
    assert incomplete(results) == "its results could not be written (No space left on device)"


def test_with_no_temporary_folder_either_the_summary_is_to_be_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    def no_temp(**kwargs: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", no_temp)
    plugin = SpecrigPlugin(_plan(tmp_path / "run"), write=_full)
    plugin.summary = _summary()
    plugin.finish()
    assert plugin.rescued is None and "the summary is printed as JSON below" in plugin.write_error.message  # type: ignore[union-attr]


def test_an_error_specrig_cannot_name_still_keeps_the_summary(tmp_path: Path) -> None:
    def broken(results: Path, summary: RunSummary) -> None:
        raise OSError(errno.EIO, "Input/output error")

    plugin = SpecrigPlugin(_plan(tmp_path / "run"), write=broken)
    plugin.summary = _summary()
    plugin.finish()
    assert isinstance(plugin.write_error, BenchError) and plugin.rescued is not None


# ------------------------------------------------------------------ nothing to plot, nothing drawn; the stall's count


def test_a_run_with_no_measurement_writes_no_plot_and_no_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        write_report(tmp_path, _summary())
    assert not list(tmp_path.glob("*.png")), "a plot with nothing to show"
    assert not [str(w.message) for w in seen]
    assert "![" not in (tmp_path / "report.md").read_text()


def test_a_stall_counts_the_requests_sent() -> None:
    with serve_in_thread(Behaviour(stall_after_chunks=1)) as s, pytest.raises(BenchError) as ei:
        run_openai(
            s.base_url, "m", prompts=[Prompt(f"p{i}", "hi") for i in range(5)], max_tokens=8, stall_timeout_s=0.5
        )
    assert str(ei.value).startswith(
        "1 of 5 requests failed (4 not sent: the run stops at the first failure); first: p0"
    )
