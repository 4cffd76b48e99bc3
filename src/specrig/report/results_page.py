"""The results page (``specrig results``): every ``studies/*/results.toml`` in name order, a
section per study (its title, date, host and folder, then its tables, :mod:`.results_tables`), as
one markdown file written atomically (docs/results.md). The page is a function of the files alone:
fixed number formats, links relative to the page, no date of its making, so making it again from
the same captures gives the same bytes, and ``--check`` can say where a committed page went stale."""

from __future__ import annotations

from pathlib import Path

from specrig.core import atomic
from specrig.report.results_file import Study, find_studies, link, load_study, locate
from specrig.report.results_tables import TABLES

__all__ = ["render_page", "write_page", "check_page", "first_difference"]


def _header(studies: Path, page_dir: Path) -> list[str]:
    return [
        "# Results",
        "",
        f"The headline tables of the studies in [studies/]({link(studies, page_dir)}/), made by `specrig results` "
        "(`nox -s results`) from the captures in the studies' folders that each study's `results.toml` names.",
        "A bench table's columns are those of `specrig report` ([metrics.md](metrics.md) says what each measures); "
        "an offline table's figures are teacher-forced on held-out prompts (mean length at k: 1 + the per-position "
        "rates to k; as served: walked where the engine drafts).",
        "`specrig results --check` says whether this page is what the captures give: edit a `results.toml`, "
        "then run `specrig results`.",
    ]


def _section(study: Study, page_dir: Path) -> list[str]:
    r = study.results
    lines = [
        "",
        f"## {r.title}",
        "",
        f"{study.date} · {r.host} · study: [{study.name}]({link(study.folder, page_dir)}/)",
    ]
    for i, table in enumerate(r.table):
        captures = locate(study, i, page_dir)
        lines += ["", f"*{table.caption}* · {table.host or r.host}", "", *TABLES[table.kind](table, captures)]
    return lines


def render_page(studies: Path, out: Path) -> str:
    """The page's text for the studies under ``studies``, its links relative to ``out``'s folder."""
    page_dir = out.parent
    lines = _header(studies, page_dir)
    for source in find_studies(studies):
        lines += _section(load_study(source), page_dir)
    return "\n".join(lines) + "\n"


def write_page(studies: Path, out: Path) -> Path:
    """Render the page and write it to ``out`` atomically (nothing is written when a study is refused)."""
    text = render_page(studies, out)
    atomic.check_folder(out.parent, what="the results page's folder", fix="name a writable place: --out FILE")
    return atomic.write_text(out, text)


def first_difference(current: str, wanted: str) -> str | None:
    """Where ``current`` first differs from ``wanted``, line by line (None: the same)."""
    if current == wanted:
        return None
    have, want = current.splitlines(), wanted.splitlines()
    for n, (a, b) in enumerate(zip(have, want, strict=False), start=1):
        if a != b:
            return f"line {n}: the page has\n    {a}\n  where the captures give\n    {b}"
    n = min(len(have), len(want)) + 1
    if len(have) > len(want):
        return f"line {n}: the page goes on past the end of what the captures give:\n    {have[n - 1]}"
    if len(have) < len(want):
        return f"line {n}: the page ends where the captures give\n    {want[n - 1]}"
    return "the same lines, different line endings or final newline"


def check_page(studies: Path, out: Path) -> str | None:
    """Why the page at ``out`` is not what ``specrig results`` would write (None: it is)."""
    wanted = render_page(studies, out)
    if not out.is_file():
        return f"{out} does not exist: `specrig results` writes it"
    try:
        current = out.read_bytes().decode()
    except UnicodeDecodeError:
        return f"{out} is not UTF-8 text: `specrig results` writes it again"
    diff = first_difference(current, wanted)
    return None if diff is None else f"{out} differs from what `specrig results` writes, first at {diff}"
