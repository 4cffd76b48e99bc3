"""Studies: several specrig commands run as one typed, resumable job. A study file (TOML)
lists steps, each a specrig sub-command with its options as a table (:mod:`.model`), checked
by the same parsers and models as the command line before anything runs (:mod:`.steps`,
:mod:`.plan`); :mod:`.run` runs them into one study folder, skipping what is unchanged,
and writes the manifest and one report; :mod:`.pack` carries a study folder home in volumes."""

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT: tuple[str, ...] = ("core", "recipe", "host", "lab", "report", "model", "drafter", "env", "builder")
