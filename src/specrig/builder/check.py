"""``specrig build NAME --check``: the built wheel run on the GPU by the definition's check script
(``[check] script``, a file of ``inenv/``), in the build environment, with only the wheel's contents
added to its path. The script writes JSON; this module adds what the wheel is (file, sha256, the SASS
archs of each library in it), keeps the result beside the build logs (written atomically) and renders
it as a table. A failed case exits like a failed build."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from specrig.builder.fatbin import sass_archs
from specrig.builder.plan import BuildPlan
from specrig.core import atomic
from specrig.core.digest import sha256_file
from specrig.core.errors import BuildError, ConfigError
from specrig.core.log import log

__all__ = ["check_wheel", "render_check"]


def check_wheel(plan: BuildPlan, wheel: Path) -> tuple[dict[str, Any], Path]:
    """Run the check; return its result and where it was kept. Raises when it cannot run or a case fails."""
    d = plan.definition
    if d.check is None:
        raise ConfigError(f"build {d.name} defines no check", hint=f"add a [check] table to {d.path.name}")
    if not plan.python_exists:
        raise ConfigError(
            f"the build python {plan.python} does not exist", hint="give --python of the environment that built it"
        )
    out = plan.log_dir / f"{d.name}-check-{time.strftime('%Y%m%d-%H%M%S')}.json"
    with tempfile.TemporaryDirectory(prefix=f"specrig-check-{d.name}-") as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)  # a wheel is a zip whose root is site-packages
        libs = sorted(Path(tmp).rglob("*.so"))
        sass = {p.name: {f"sm_{a}": n for a, n in sorted(sass_archs(p).items())} for p in libs}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": tmp}
        result_path = Path(tmp) / "check-result.json"
        log.step(f"check {wheel.name}: {d.check.script} in {plan.python}")
        proc = subprocess.run([str(plan.python), str(d.check.path), "--json", str(result_path)], env=env)
        if not result_path.is_file():
            raise BuildError(
                f"the check {d.check.script} could not run (exit {proc.returncode}); its error is above",
                hint="run it on a host with the recipe's GPU, in the environment that built the wheel",
            )
        result = json.loads(result_path.read_text())
        module = str(result.get("module", ""))
        if not module.startswith(tmp):
            raise BuildError(
                f"the check imported {d.name} from {module}, not from the wheel",
                hint="uninstall that copy from the build environment, or check in a clean one",
            )
        result["module"] = "(the wheel)"
    result["wheel"] = {"filename": wheel.name, "sha256": sha256_file(wheel), "size": wheel.stat().st_size}
    result["sass"] = sass
    atomic.write_json(out, result)
    print(render_check(result))
    if not result.get("ok"):
        failed = [c for c in result["cases"] if not c["ok"]]
        raise BuildError(
            f"{len(failed)} of {len(result['cases'])} cases of {wheel.name} failed the check (kept in {out})",
            hint="compare the errors above with the limits; rebuild with --rebuild, or report the case",
        )
    log.step(f"check {wheel.name}: all {len(result['cases'])} cases pass; kept in {out}")
    return result, out


def render_check(result: dict[str, Any]) -> str:
    """An attention check (``inenv/flash_attn_sdpa.py``, the one check script so far) as a table: max
    error of flash-attn, of plain same-dtype attention and of torch's SDPA in the same dtype, each
    against torch's SDPA in fp32; the limit; then the timed shape."""
    lines = [
        f"{result['flash_attn']} on {result['device']} (sm {result['capability']}), torch {result['torch']}",
        f"wheel {result['wheel']['filename']} (sha256 {result['wheel']['sha256'][:12]}...); "
        + "; ".join(
            f"{lib}: {', '.join(f'{a} x{n}' for a, n in archs.items()) or 'no SASS'}"
            for lib, archs in result.get("sass", {}).items()
        ),
        f"criterion: {result['criterion']}",
        f"{'dtype':<9}{'hdim':>5}{'causal':>7}  {'tensor':<6}{'flash':>10}{'plain':>10}{'sdpa':>10}{'limit':>10}  ok",
    ]
    for c in result["cases"]:
        for i, t in enumerate(("out", "dq", "dk", "dv")):
            e = c[t]
            head = f"{c['dtype']:<9}{c['hdim']:>5}{str(c['causal']):>7}" if i == 0 else " " * 21
            row = f"{e['flash']:>10.2e}{e['plain']:>10.2e}{e['sdpa']:>10.2e}{e['limit']:>10.2e}"
            lines.append(f"{head}  {t:<6}{row}  {'ok' if e['ok'] else 'FAIL'}")
    s = result.get("speed")
    if s:
        shape = f"{s['dtype']}, batch {s['batch']}, {s['seqlen']} tokens, {s['heads']} heads, hdim {s['hdim']}, causal"
        lines.append(f"speed ({shape}): ms (TFLOP/s)")
        for who in ("flash", "sdpa"):
            t = s[who]
            lines.append(
                f"  {who:<6} forward {t['fwd_ms']:.3f} ({t['fwd_tflops']:.0f})   "
                f"forward+backward {t['fwd_bwd_ms']:.3f} ({t['fwd_bwd_tflops']:.0f})"
            )
    n_ok = sum(c["ok"] for c in result["cases"])
    lines.append(f"{n_ok} of {len(result['cases'])} cases pass")
    return "\n".join(lines)
