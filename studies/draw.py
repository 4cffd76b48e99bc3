"""Draw a study's pictures from its capture: ``python studies/draw.py FOLDER [OUT_DIR]`` calls
``draw(OUT_DIR)`` of studies/FOLDER/test_replay.py, the replay that recomputes the figures the
pictures show, and prints the files it wrote (OUT_DIR: the study's folder unless given, where its
README shows them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

STUDIES = Path(__file__).resolve().parent
sys.path.insert(0, str(STUDIES.parent / "tests"))  # the helpers replays share with tests/ (as studies/conftest.py)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(f"usage: python studies/draw.py FOLDER [OUT_DIR]\n{__doc__}", file=sys.stderr)
        return 2
    folder = STUDIES / Path(argv[0]).name
    replay = folder / "test_replay.py"
    spec = importlib.util.spec_from_file_location("test_replay", replay) if replay.is_file() else None
    if spec is None or spec.loader is None:
        print(
            f"error: no replay at {replay} (a study that draws pictures has studies/FOLDER/test_replay.py)",
            file=sys.stderr,
        )
        return 2
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "draw"):
        print(f"error: {replay} draws no picture (it has no draw(out))", file=sys.stderr)
        return 2
    for path in module.draw(Path(argv[1]) if len(argv) == 2 else folder):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
