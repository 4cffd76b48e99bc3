"""Drafter layer check: does the serving engine feed an EAGLE-3 drafter the
hidden states it was trained on?

An EAGLE-3 drafter reads three auxiliary hidden states of the target. Its
config names them with ``eagle_aux_hidden_state_layer_ids``, but the tools
disagree on what "layer k" means. Everything here is expressed as a *residual
position*: position p is the residual stream entering decoder layer p (so
p = k + 1 is the output of layer k; p = N is the final pre-norm output).

===============================  ====================================  ==============================
who                              id k means                            default ids (N target layers)
===============================  ====================================  ==============================
vLLM serving (EAGLE-3)           input of layer k      -> p = k        (2, N//2, N-3)
SGLang serving                   output of layer k     -> p = k + 1    none given: p = (2, N//2, N-3)
speculators < 0.5 (training)     output of layer k     -> p = k + 1    [2, N//2, N-3] (+ N-1 as target)
speculators >= 0.5 (training)    vLLM's convention     -> p = k        [2, N//2, N-3] (+ N)
SpecForge / SGLang (training)    SGLang's convention   -> p = k + 1    none given: p = (2, N//2, N-3)
===============================  ====================================  ==============================

speculators 0.3.x did not even write the ids it used into the drafter config
(upstream added that in speculators PR #379), so vLLM falls back to its own
default and serves positions (2, N//2, N-3) to a drafter trained on
(3, N//2+1, N-2): every feature one layer early. That is one of the likely
causes of the 15 % acceptance in the original story.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from specrig.core.aux_layers import positions_served
from specrig.core.digest import config_fingerprint
from specrig.core.errors import ConfigError
from specrig.core.registry import ENGINES

__all__ = ["ENGINES", "TRAINERS", "LayerReport", "Producer", "check_drafter", "layer_note", "read_drafter"]

TRAINERS = ("speculators-0.3", "speculators-0.5", "specforge", "sglang", "vllm", "specrig")


@dataclass(frozen=True)
class Producer:
    """What trained (or extracted data for) the drafter, and how we know."""

    name: str
    """One of TRAINERS, or ``unknown``."""
    evidence: str


@dataclass
class LayerReport:
    producer: Producer
    engine: str
    num_layers: int | None
    config_ids: list[int] | None
    trained_positions: list[int] | None
    served_positions: list[int] | None
    findings: list[str] = field(default_factory=list)
    fix: str | None = None
    target_mismatch: str | None = None
    """Why the drafter was not made for the given target (None: it was, or unknown)."""

    @property
    def mismatch(self) -> bool:
        return (
            self.trained_positions is not None
            and self.served_positions is not None
            and (self.trained_positions != self.served_positions)
        )

    @property
    def offset(self) -> int | None:
        """served - trained when it is the same for every feature."""
        if not self.mismatch or len(self.trained_positions or []) != len(self.served_positions or []):
            return None
        diffs = {s - t for s, t in zip(self.served_positions, self.trained_positions, strict=True)}  # type: ignore[arg-type]
        return diffs.pop() if len(diffs) == 1 else None


def _default_ids(n: int) -> list[int]:
    return [2, n // 2, n - 3]


def read_drafter(path: Path) -> dict:
    """The drafter's config.json (``path`` is the folder or the file)."""
    file = path / "config.json" if path.is_dir() else path
    fix = "a drafter's config.json is a JSON object (its architectures, eagle_config, ...)"
    try:
        config = json.loads(file.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no drafter config at {file}", hint="pass the drafter's folder or its config.json") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror or exc}", hint=fix) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file} is not UTF-8 text (byte {exc.start})", hint=fix) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file} is not valid JSON: {exc}", hint=fix) from None
    if not isinstance(config, dict):
        raise ConfigError(f"{file} holds a JSON {type(config).__name__}, not an object", hint=fix)
    return config


def aux_ids(config: dict, where: str = "config.json") -> list[int] | None:
    """The aux layer ids a drafter config records (top level, else inside ``eagle_config``)."""
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if ids is None and isinstance(config.get("eagle_config"), dict):
        ids = config["eagle_config"].get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in ids):
        raise ConfigError(
            f"{where}: eagle_aux_hidden_state_layer_ids must be a list of layer numbers, got {ids!r}",
            hint="write e.g. [2, 15, 27]: the target layers whose hidden states the drafter reads",
        )
    return list(ids)


def detect_producer(config: dict, trained_with: str | None = None) -> Producer:
    if trained_with:
        return Producer(trained_with, "given with --trained-with")
    mine = config.get("specrig") or {}
    if mine.get("trained") and mine.get("trained_aux_positions") is not None:
        return Producer(
            "specrig", f"config records the residual positions it was trained on: {mine['trained_aux_positions']}"
        )
    version = config.get("speculators_version")
    if version:
        try:
            major = Version(version)
        except InvalidVersion:
            return Producer("unknown", f"speculators_version {version!r} is not a version")
        name = "speculators-0.5" if major >= Version("0.5") else "speculators-0.3"
        return Producer(name, f"config has speculators_version {version}")
    archs = config.get("architectures") or []
    if any("Eagle3" in a for a in archs) and not config.get("speculators_model_type"):
        return Producer(
            "specforge",
            f"architectures {archs} without speculators fields: the EAGLE-3 / SpecForge (SGLang) format",
        )
    return Producer("unknown", "no speculators_version and no EAGLE-3 architecture name")


def _num_layers(config: dict, num_layers: int | None, target_config: Path | None) -> int | None:
    if num_layers:
        return num_layers
    if target_config:
        target = read_drafter(target_config)
        text = target.get("text_config") or target
        if "num_hidden_layers" in text:
            return int(text["num_hidden_layers"])
    return None


def _trained(producer: str, ids: list[int] | None, n: int | None) -> list[int] | None:
    if producer in ("speculators-0.3", "specforge", "sglang"):
        if ids is not None:
            return [k + 1 for k in ids]
        if n is None:
            return None
        # speculators < 0.5 captured outputs of its default ids; SpecForge/SGLang without
        # ids captured SGLang's default positions.
        return [k + 1 for k in _default_ids(n)] if producer == "speculators-0.3" else _default_ids(n)
    if producer in ("speculators-0.5", "vllm", "specrig"):
        if ids is not None:
            return list(ids)
        return _default_ids(n) if n is not None else None
    return None


def _recorded(config: dict) -> list[int] | None:
    """Positions a specrig-trained drafter recorded (exact: no convention to guess)."""
    pos = (config.get("specrig") or {}).get("trained_aux_positions")
    return [int(p) for p in pos] if pos is not None else None


def _served(engine: str, ids: list[int] | None, n: int | None) -> list[int] | None:
    if ids is not None:
        return positions_served(engine, ids)
    return _default_ids(n) if n is not None else None


def check_drafter(
    path: Path,
    *,
    engine: str = "vllm",
    trained_with: str | None = None,
    num_layers: int | None = None,
    target_config: Path | None = None,
) -> LayerReport:
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}", hint=f"one of {', '.join(ENGINES)}")
    if trained_with and trained_with not in TRAINERS:
        raise ConfigError(f"unknown --trained-with {trained_with!r}", hint=f"one of {', '.join(TRAINERS)}")
    config = read_drafter(path)
    ids = aux_ids(config, str(path))
    producer = detect_producer(config, trained_with)
    n = _num_layers(config, num_layers, target_config)
    report = LayerReport(
        producer=producer,
        engine=engine,
        num_layers=n,
        config_ids=ids,
        trained_positions=_recorded(config) if producer.name == "specrig" else _trained(producer.name, ids, n),
        served_positions=_served(engine, ids, n),
    )
    if target_config:
        report.target_mismatch = target_mismatch(config, target_config)
    _explain(report)
    if report.target_mismatch:
        report.findings.append(f"WRONG TARGET: {report.target_mismatch}")
    return report


# Shapes a drafter shares with its target: the embedding it borrows and the features it reads.
_SHARED = ("hidden_size", "vocab_size")


def target_mismatch(drafter: dict, target: Path | dict, *, own_model: bool = False) -> str | None:
    """Why ``drafter`` (its config) was not made for ``target`` (a folder, config.json or
    its dict), or None. A specrig drafter records its target's config fingerprint (which
    survives another converter version or dtype) and its layer count; any drafter must
    share the target's hidden size and vocabulary. ``own_model``: a draft model (a language
    model of its own, ``draft_model``) shares only the vocabulary."""
    if isinstance(target, dict):
        tcfg, raw = target, None
    else:
        t = Path(target)
        t = t / "config.json" if t.is_dir() else t
        raw = t.read_bytes() if t.is_file() else None
        tcfg = json.loads(raw) if raw else {}
    text = tcfg.get("text_config") or tcfg
    meta = drafter.get("specrig") or {}
    for key in ("vocab_size",) if own_model else _SHARED:
        want = drafter.get("target_hidden_size" if key == "hidden_size" else key) or drafter.get(key)
        have = text.get(key)
        if want is not None and have is not None and int(want) != int(have):
            return f"the drafter's {key} is {want}, the target's {have}"
    if own_model:
        return None
    # a fingerprint ignores how the config was written (converter version, dtype); drafters
    # from before it recorded the file's sha256
    if meta.get("target_config_fingerprint"):
        key, given = "target_config_fingerprint", config_fingerprint(tcfg) if tcfg else None
    else:
        key, given = "target_config_sha256", hashlib.sha256(raw).hexdigest() if raw is not None else None
    recorded = meta.get(key)
    if recorded and given and given != recorded:
        layers = meta.get("target_layers")
        extra = f" ({layers} layers then, {text.get('num_hidden_layers')} now)" if layers else ""
        return (
            f"it was trained for another target: {key} {recorded[:12]}... recorded, "
            f"{given[:12]}... given{extra}; trained for {meta.get('target', '?')}"
        )
    return None


def _explain(r: LayerReport) -> None:
    add = r.findings.append
    add(f"producer: {r.producer.name} ({r.producer.evidence})")
    add(f"eagle_aux_hidden_state_layer_ids in the config: {r.config_ids if r.config_ids is not None else 'absent'}")
    if r.config_ids is None and r.num_layers is None:
        add(
            "the config names no layers and the target's layer count is unknown: pass --num-layers N or --target-config PATH"
        )
    if r.producer.name == "unknown":
        add("cannot tell which convention trained this drafter: pass --trained-with " + "|".join(TRAINERS))
        return
    if r.trained_positions is None or r.served_positions is None:
        return
    if r.producer.name == "speculators-0.3":
        add(
            "speculators < 0.5 extracted the OUTPUT of each layer id; if this drafter was fine-tuned "
            "from a base trained with another tool (e.g. an SGLang/SpecForge drafter), check that base's ids too"
        )
    add(f"trained on residual positions {r.trained_positions} (p = input of layer p)")
    add(f"{r.engine} serves residual positions {r.served_positions}")
    if not r.mismatch:
        add("consistent: the engine feeds the drafter the features it was trained on")
        return
    off = r.offset
    if off is not None:
        add(
            f"MISMATCH: {r.engine} feeds every feature {abs(off)} layer{'s' if abs(off) != 1 else ''} "
            f"{'later' if off > 0 else 'earlier'} than training captured"
        )
    else:
        add("MISMATCH: the served layers differ from the trained ones")
    want = r.trained_positions if r.engine == "vllm" else [p - 1 for p in r.trained_positions]
    r.fix = f'set "eagle_aux_hidden_state_layer_ids": {want} in the drafter\'s config.json for {r.engine}' + (
        " (vLLM reads it in GPUModelRunner._get_eagle3_aux_layers_from_config)" if r.engine == "vllm" else ""
    )
    if r.num_layers is not None and r.num_layers in want and r.engine == "vllm":
        r.fix += (
            f"; position {r.num_layers} is the final pre-norm output, which specrig's DeepSeek patch "
            "(0003) captures; other vLLM 0.16 models stop at N-1"
        )


def layer_note(path: Path | str | None, engine: str = "vllm") -> str | None:
    """One line for a bench diagnosis: what is wrong with the drafter's layer
    convention under ``engine``, or None when it is consistent or cannot be told."""
    if not path:
        return None
    try:
        r = check_drafter(Path(path), engine=engine)
    except ConfigError:
        return None
    if not r.mismatch:
        return None
    line = next(
        (f for f in r.findings if f.startswith("MISMATCH")), "MISMATCH: the served layers differ from the trained ones"
    )
    return f"layer convention: {line.removeprefix('MISMATCH: ')} (trained positions {r.trained_positions}, served {r.served_positions})"
