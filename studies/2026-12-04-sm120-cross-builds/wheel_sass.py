"""The GPU code in each library of a built wheel: for every wheel given, a line with its name, size and
sha256, then one line per ``.so`` in it with its fat binaries' entries counted by (kind, arch), as
``specrig.builder.fatbin`` reads them (no cuobjdump needed): ``{('sass', 120): 47}`` is 47 sm_120 cubins,
``{}`` no GPU code. A wheel cross-built for another arch cannot run where it was built; this says what
it holds (studies/2026-12-04-sm120-cross-builds/capture/*.sass.txt are its output).

    RIG/venv/bin/python wheel_sass.py WHEEL.whl [WHEEL.whl ...]
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

from specrig.builder.fatbin import fatbin_entries


def libraries(wheel: Path) -> list[tuple[str, dict[tuple[str, int], int]]]:
    """``(path in the wheel, {(kind, arch): count})`` for every shared library of the wheel, by path."""
    out = []
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        for name in sorted(n for n in z.namelist() if n.endswith(".so")):
            entries = fatbin_entries(Path(z.extract(name, tmp)))
            out.append((name, dict(Counter((e.kind, e.arch) for e in entries))))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: wheel_sass.py WHEEL.whl [WHEEL.whl ...]", file=sys.stderr)
        return 2
    for wheel in map(Path, argv):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        print(f"== {wheel.name} {wheel.stat().st_size} bytes sha256 {digest}")
        for name, counts in libraries(wheel):
            print(name, counts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
