"""What the studies' replays share: a bench's captured summary (a real GPU run's ``summary.json``, kept
gzipped in a study's capture/) loaded as the bench loads it, the figures a captured chat bench quotes,
and a study's tables as the results page shows them."""

from __future__ import annotations

import gzip
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specrig.lab.results import LoadPoint, load_summary
from specrig.report.results_file import load_study, locate
from specrig.report.results_tables import TABLES

SERVED = "served on held-out chat, one stream, the engine's counters, k=3"
"""The curve plots' label for :func:`chat_figures` mean lengths at one stream."""


def captured_summary(gz: Path, folder: Path):
    """The captured ``summary.json.gz`` unpacked into ``folder`` and loaded as the bench loads it."""
    with gzip.open(gz) as src, open(folder / "summary.json", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return load_summary(folder)


def measurement(s, config: str, c: int):
    return next(m for m in s.measurements if m.config == config and m.point == LoadPoint(concurrency=c))


def pairing(s, config: str, c: int):
    return next(p for p in s.pairings if p.config == config and p.point == LoadPoint(concurrency=c))


@dataclass(frozen=True)
class ChatFigures:
    """One speculative configuration at one load of a captured chat bench, against its baseline."""

    rate: float  # accepted / drafted tokens, in percent
    length: float  # mean acceptance length: 1 + accepted / drafts
    speedup: float  # decode tok/s over the baseline's
    paired: float  # the pairing's own speedup (its mean)
    identical: int  # answers token-identical to the baseline's
    step_cost: float  # the pairing's measured step cost
    counters: Any  # the engine's speculative counters


def chat_figures(s, config: str, c: int) -> ChatFigures:
    """The figures the H200 chat captures quote, from the summary itself; the workload checked to be
    held-out ShareGPT chat to EOS, 24 prompts x 512, and every counter this run's own."""
    w = s.workload
    assert w.chat and w.stop_at_eos and w.dataset == "sharegpt" and w.num_prompts == 24 and w.max_tokens == 512
    assert all(m.server_generation_tokens == m.completion_tokens for m in s.measurements)  # the counters are ours
    p = pairing(s, config, c)
    m, b = measurement(s, config, c), measurement(s, "baseline", c)
    sc = m.spec_counters
    assert sc is not None and sc.k == 3
    ids = {r.prompt_id: r.token_ids for r in b.requests}
    return ChatFigures(
        rate=100 * sc.accepted_tokens / sc.draft_tokens,
        length=1 + sc.accepted_tokens / sc.drafts,
        speedup=m.decode_tok_s.mean / b.decode_tok_s.mean,
        paired=p.speedup.mean,
        identical=sum(r.token_ids == ids[r.prompt_id] for r in m.requests),
        step_cost=p.step_cost,
        counters=sc,
    )


def page_tables(study: Path) -> list[list[str]]:
    """The study's tables as the results page shows them: its results.toml read and each table drawn
    by today's code, as ``specrig results`` draws it (one list of lines per table)."""
    s = load_study(study / "results.toml")
    return [TABLES[t.kind](t, locate(s, i, study)) for i, t in enumerate(s.results.table)]


def cells(lines: list[str]) -> list[list[str]]:
    """The cells of the first markdown table in ``lines``, row by row (its header and rule left out)."""
    table = next(line for line in lines if line.startswith("|")).splitlines()
    return [[c.strip() for c in row.strip().strip("|").split("|")] for row in table[2:]]
