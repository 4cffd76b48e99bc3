"""Offline acceptance: the drafter's teacher-forced greedy acceptance per draft
position on held-out hidden states, no server. Written as ``offline_eval.json``
in the drafter's folder, beside what the bench measures online.

Fields of offline_eval.json (:class:`OfflineEval`): ``acceptance_rate`` (vLLM's
definition: accepted / drafted tokens, over all k positions),
``per_position`` (fraction of drafts whose tokens 0..j were all accepted, j < k),
``mean_acceptance_length`` (1 + sum of per_position), ``k``,
``held_out_tokens`` (drafting start positions scored), ``held_out_samples``,
``step_accuracy`` (unconditional hit rate per step), ``trained_aux_positions``,
``served_aux_positions`` (the ids the folder's config serves: features are taken
there, so a shifted twin is scored as vLLM would serve it), ``walk`` (per k, the
same acceptance counted where the engine drafts: only where a verification step
ends; where right drafts come in runs this is lower than counting every
position, and it is what online acceptance follows), ``source``, and
``bench_prompts``: the same figures on the bench's own workload (the story
prompts, the target's greedy answers of the recipe's ``bench.max_tokens``
tokens, EOS ignored, as the bench asks vLLM), the figure the bench compares its
online acceptance with."""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specrig.core import atomic
from specrig.core.digest import sha256_file
from specrig.core.errors import ConfigError
from specrig.core.log import log
from specrig.drafter.inenv_run import INENV, run_inenv
from specrig.drafter.stages import file_digest, stage_key
from specrig.env.make import Env
from specrig.model.drafters import OFFLINE_EVAL, drafter_files
from specrig.model.offline import OfflineEval, offline_eval_status

__all__ = [
    "OfflineEval",
    "BenchPrompts",
    "evaluate_drafter",
    "OFFLINE_EVAL",
]


def _listing_sha256(folder: Path) -> str:
    """sha256 of a data folder's file names and sizes (hidden states are GBs: not their bytes)."""
    lines = [
        f"{p.relative_to(folder).as_posix()} {p.stat().st_size}\n" for p in sorted(folder.rglob("*")) if p.is_file()
    ]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


@dataclass(frozen=True)
class BenchPrompts:
    """The bench's workload for the offline figure: raw prompts, fixed length."""

    dataset: str
    max_tokens: int
    prompts: list[tuple[str, str]]
    """(id, text) pairs."""
    cache: Path
    """Folder for the target's greedy answers (one JSON file per target and environment)."""


def _resolve(drafter: Path, target: Path | None, heldout: Path | None) -> tuple[str, Path, Path, dict]:
    """(the scoring script, the target, the held-out hidden states, the drafter's specrig block):
    the target and held-out data default to what the drafter's config recorded at training."""
    cfg_path = drafter / "config.json"
    if not cfg_path.is_file():
        raise ConfigError(f"{drafter} is not a drafter folder (no config.json)", hint="pass the drafter's folder")
    cfg = json.loads(cfg_path.read_text())
    meta = cfg.get("specrig") or {}
    # a checkpoint speculators' trainer saved is scored with its own model (in an environment with it)
    script = "eval_speculators.py" if cfg.get("speculators_model_type") else "eval_eagle3.py"
    target = target or (Path(meta["target_path"]) if meta.get("target_path") else None)
    heldout = heldout or (Path(meta["heldout_hidden"]) if meta.get("heldout_hidden") else None)
    if target is None or heldout is None or not heldout.is_dir():
        raise ConfigError(
            f"no held-out hidden states known for {drafter}",
            hint="evaluate a drafter trained by `specrig drafter` (its config names them), or pass --heldout DIR and --target DIR",
        )
    return script, target, heldout, meta


def _inputs(env: Env, drafter: Path, target: Path, heldout: Path, script: str, spec_text: str | None) -> dict:
    """What the figures depend on: the drafter's bytes (hashed before they are read), the target, the
    held-out data, the bench's prompts, the scripts and the environment."""
    return {
        "drafter_files": drafter_files(drafter),
        "target": str(target),
        "target_config_sha256": sha256_file(target / "config.json") if (target / "config.json").is_file() else None,
        "heldout": str(heldout),
        "heldout_listing_sha256": _listing_sha256(heldout),
        "bench_prompts_sha256": hashlib.sha256(spec_text.encode()).hexdigest() if spec_text is not None else None,
        "scripts": file_digest(*(INENV / f for f in (script, "eval_eagle3.py", "eagle3_model.py"))),
        "env_lock": env.lock_digest,
    }


def evaluate_drafter(
    env: Env,
    drafter: Path,
    *,
    target: Path | None = None,
    heldout: Path | None = None,
    k: int | None = None,
    bench: BenchPrompts | None = None,
) -> OfflineEval:
    """Score ``drafter`` on held-out hidden states (and on the bench's prompts, when
    given) and write offline_eval.json into it. ``target`` / ``heldout`` default to
    what the drafter's config recorded at training. An offline_eval.json already there for the
    same drafter files, target, held-out data, bench prompts, k, scripts and environment is
    returned as it is (a rerun of a cached pipeline, the reference's comparison run)."""
    script, target, heldout, meta = _resolve(Path(drafter), target, heldout)
    k = k or int(meta.get("ttt_steps", 3))
    spec_text = None
    if bench is not None:
        prompts = [{"id": i, "text": t} for i, t in bench.prompts]
        spec_text = json.dumps({"dataset": bench.dataset, "max_tokens": bench.max_tokens, "prompts": prompts})
    inputs = _inputs(env, Path(drafter), target, heldout, script, spec_text)
    prior, _ = offline_eval_status(Path(drafter))
    if prior is not None and prior.k == k and prior.inputs == inputs:  # the same files, data and scripts
        log.info(f"  offline acceptance of {Path(drafter).name}: cached ({OFFLINE_EVAL} holds for these inputs)")
        return prior
    # the script's raw answer and the bench's prompt spec: unique temp files (two evaluations never share one)
    with tempfile.TemporaryDirectory(prefix="specrig-eval-") as tmp:
        out, spec = Path(tmp) / OFFLINE_EVAL, Path(tmp) / "bench-prompts.json"
        extra: list[str] = []
        if bench is not None and spec_text is not None:
            atomic.write_text(spec, spec_text)
            key = stage_key("bench-answers", {"v": 1, "target": str(target), "env_lock": env.lock_digest})
            extra = ["--bench-prompts", str(spec), "--bench-answers", str(bench.cache / f"bench-answers-{key}.json")]
        run_inenv(
            env,
            script,
            str(target),
            str(drafter),
            str(heldout),
            str(out),
            "--k",
            str(k),
            *extra,
            what=f"offline acceptance of {Path(drafter).name}",
        )
        d = json.loads(out.read_text())
    result = OfflineEval(
        acceptance_rate=d["acceptance_rate"],
        per_position=d["per_position"],
        mean_acceptance_length=d["mean_acceptance_length"],
        k=d["k"],
        held_out_tokens=d["held_out_tokens"],
        held_out_samples=d["held_out_samples"],
        step_accuracy=d["step_accuracy"],
        trained_aux_positions=meta.get("trained_aux_positions"),
        served_aux_positions=d.get("served_aux_positions"),
        bench_prompts=d.get("bench_prompts"),
        walk=d.get("walk"),
        inputs=inputs,
    )
    atomic.write_text(Path(drafter) / OFFLINE_EVAL, json.dumps(result.as_dict(), indent=2))
    return result
