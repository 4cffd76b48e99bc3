"""Where greedy outputs diverge, and why: each speculative run's output compared with its
paired baseline's, prompt by prompt (:func:`lossless`), then, after the measurements (the
servers stopped), every diverging token explained by the target itself (:func:`explain`):
its float32 logits at that position, given the prompt and the baseline's tokens before it,
computed offline in one run of ``inenv/target_margins.py`` with the engine environment's
Python. A near-tie (:data:`~specrig.lab.lossless.NEAR_TIE_LOGITS`) is bf16 numerics; anything
else is a real loss. The explanation never costs the measurement: when it cannot be made,
the divergences stay as measured and say why."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specrig.core import atomic
from specrig.core.errors import SpecrigError
from specrig.core.log import log
from specrig.env.script import run_script
from specrig.lab.lossless import NEAR_TIE_LOGITS, Divergence, Lossless, TargetMargin, classify
from specrig.lab.results import Measurement, Pairing

__all__ = ["lossless", "explain", "Site", "target_margins", "INENV"]

INENV = Path(__file__).parent / "inenv"


def _first_diff(a: list[Any] | str, b: list[Any] | str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _baseline_of(spec: Measurement, baselines: list[Measurement]) -> Measurement | None:
    """The baseline a spec run is compared with: the same repeat, else the first."""
    return next((b for b in baselines if b.repeat == spec.repeat), baselines[0] if baselines else None)


def lossless(spec: Measurement, baselines: list[Measurement]) -> Lossless | None:
    """Greedy outputs of the spec run against the baseline's, prompt by prompt
    (token ids when the client kept them, else text)."""
    base = _baseline_of(spec, baselines)
    if base is None:
        return None
    by_id = {r.prompt_id: r for r in base.requests}
    compared = identical = 0
    divs: list[Divergence] = []
    for r in spec.requests:
        b = by_id.get(r.prompt_id)
        if b is None:
            continue
        compared += 1
        if r.token_ids is not None and b.token_ids is not None:
            pos, unit, sa, sb = _first_diff(b.token_ids, r.token_ids), "token", b.token_ids, r.token_ids
        else:
            pos, unit, sa, sb = _first_diff(b.text, r.text), "char", b.text, r.text
        if pos is None:
            identical += 1
        else:
            divs.append(
                Divergence(
                    prompt_id=r.prompt_id,
                    position=pos,
                    unit=unit,
                    baseline=str(sa[pos : pos + 8]),
                    spec=str(sb[pos : pos + 8]),
                )
            )
    return Lossless(compared=compared, identical=identical, divergences=divs)


@dataclass(frozen=True)
class Site:
    """One diverging token to explain: the raw prompt, the baseline's tokens before the
    divergence, and the token each side produced there."""

    prompt: str
    prefix: tuple[int, ...]
    baseline: int
    spec: int

    @property
    def context(self) -> str:
        """Sites with the same prompt and prefix share one forward pass."""
        return hashlib.sha256(json.dumps([self.prompt, list(self.prefix)]).encode()).hexdigest()[:16]


def target_margins(
    sites: list[Site],
    *,
    python: str,
    model_path: str,
    work: Path,
    threshold: float = NEAR_TIE_LOGITS,
    chat: bool = False,
) -> dict[Site, TargetMargin]:
    """The target's logits at every site, in one run of the script (the model loaded once);
    its input and output stay in ``work``. ``chat``: the prompts were sent as chat messages
    (``bench --chat``), so the script renders them with the model's chat template as the server
    did. Raises :class:`SpecrigError` when the run fails."""
    contexts: dict[str, dict[str, Any]] = {}
    for s in sites:
        c = contexts.setdefault(
            s.context, {"key": s.context, "prompt": s.prompt, "chat": chat, "prefix": list(s.prefix), "tokens": []}
        )
        c["tokens"] += [s.baseline, s.spec]
    given, answer = work / "target-margins-in.json", work / "target-margins.json"
    atomic.write_json(given, {"contexts": list(contexts.values())})
    with atomic.atomic_path(answer) as tmp:
        run_script(
            python,
            INENV / "target_margins.py",
            model_path,
            str(given),
            str(tmp),
            what=f"the target's logits at {len(contexts)} diverging position(s)",
        )
    out = json.loads(answer.read_text())
    return {s: _margin(out["contexts"][s.context], s, out.get("device", "cpu"), threshold) for s in sites}


def _margin(ctx: dict[str, Any], s: Site, device: str, threshold: float) -> TargetMargin:
    (t1, z1, _), (t2, z2, _) = ctx["top"]
    b, sp = ctx["tokens"][str(s.baseline)], ctx["tokens"][str(s.spec)]
    return TargetMargin(
        top=[t1, t2],
        top_logits=[z1, z2],
        margin=z1 - z2,
        baseline_token=s.baseline,
        spec_token=s.spec,
        baseline_logit=b["logit"],
        spec_logit=sp["logit"],
        gap=b["logit"] - sp["logit"],
        baseline_rank=b["rank"],
        spec_rank=sp["rank"],
        threshold=threshold,
        verdict=classify(z1, b["logit"], sp["logit"], threshold),
        device=device,
        baseline_text=b.get("text"),
        spec_text=sp.get("text"),
    )


def _site(d: Divergence, spec: Measurement, base: Measurement, prompts: Mapping[str, str]) -> Site | str:
    """The site of one divergence, or why it has none."""
    if d.unit != "token":
        return "the outputs were compared as text (no token ids)"
    text = prompts.get(d.prompt_id, prompts.get(d.prompt_id.split("#")[0]))
    if text is None:
        return f"the text of prompt {d.prompt_id} is not known"
    b = next((r.token_ids for r in base.requests if r.prompt_id == d.prompt_id), None)
    s = next((r.token_ids for r in spec.requests if r.prompt_id == d.prompt_id), None)
    if b is None or s is None:
        return "the token ids are not recorded"
    for side, ids in (("baseline", b), ("spec", s)):
        if d.position >= len(ids):
            return f"the {side} output ends at token {d.position}"
    return Site(text, tuple(b[: d.position]), b[d.position], s[d.position])


def explain(
    pairings: list[Pairing],
    measurements: list[Measurement],
    baselines: list[Measurement],
    *,
    prompts: Mapping[str, str],
    python: str | None,
    model_path: str | None,
    work: Path,
    chat: bool = False,
) -> list[Pairing]:
    """``pairings`` with every divergence explained by the target (``Divergence.target``), or
    saying why it is not (``Divergence.unexplained``); a failed computation warns, never raises."""
    found: dict[tuple[int, int], Site | str] = {}
    for i, p in enumerate(pairings):
        if not p.lossless or not p.lossless.divergences:
            continue
        runs = sorted((m for m in measurements if m.id == p.id and m.point == p.point), key=lambda m: m.repeat)
        base = _baseline_of(runs[0], [b for b in baselines if b.point == p.point]) if runs else None
        for j, d in enumerate(p.lossless.divergences):
            found[i, j] = _site(d, runs[0], base, prompts) if base else "the paired runs are not in this summary"
    sites = list(dict.fromkeys(s for s in found.values() if isinstance(s, Site)))
    margins: dict[Site, TargetMargin] = {}
    failed = None
    if sites and (not python or not model_path):
        failed = "no engine environment or model folder to run the target with (an attached --endpoint run)"
    elif sites and not any(f.suffix in (".safetensors", ".bin") for f in Path(str(model_path)).glob("*")):
        failed = "the model folder holds no weights (served with dummy weights): there is no target to ask"
    elif sites:
        log.step(f"lossless check: the target's own logits at {len(sites)} diverging token(s), float32, offline")
        try:
            margins = target_margins(sites, python=python, model_path=model_path, work=work, chat=chat)  # type: ignore[arg-type]
        except SpecrigError as exc:
            lines = [x for x in exc.message.splitlines() if x.strip()]
            why = lines[0] + (f" ... {lines[-1].strip()}" if len(lines) > 1 else "")
            failed = f"the target's logits could not be computed: {why}"
            log.warn(
                f"lossless check: divergences left unclassified; {exc.message}"
                + (f"\n  {exc.hint}" if exc.hint else "")
            )
        except Exception as exc:  # the measurement stands whatever went wrong here
            failed = f"the target's logits could not be computed: {type(exc).__name__}: {exc}"
            log.warn(f"lossless check: divergences left unclassified; {failed}")
    out = []
    for i, p in enumerate(pairings):
        if not p.lossless or not p.lossless.divergences:
            out.append(p)
            continue
        divs = []
        for j, d in enumerate(p.lossless.divergences):
            s = found[i, j]
            if isinstance(s, Site) and s in margins:
                divs.append(d.model_copy(update={"target": margins[s], "unexplained": None}))
            else:
                divs.append(d.model_copy(update={"unexplained": s if isinstance(s, str) else failed}))
        out.append(p.model_copy(update={"lossless": p.lossless.model_copy(update={"divergences": divs})}))
    return out
