"""``python -m specrig``: the same as the ``specrig`` command (a detached build runs this way)."""

from specrig.cli import main

raise SystemExit(main())
