"""The ``specrig`` command: one sub-command per nox session, one module per
command in this package. Each module holds ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``; the library code it calls
never parses argv and never prints errors itself.

This is the one place errors become output: a :class:`SpecrigError` ends the
command with its message, hint and exit code; anything else is a bug and shows
a traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType

from rich.markup import escape

from specrig.core import interrupts
from specrig.core.atomic import os_error
from specrig.core.errors import SpecrigError
from specrig.core.log import log

# the rooms this package may import (tests/test_architecture.py holds every import to it)
MAY_IMPORT = "*"

__all__ = ["main", "COMMANDS"]

# command name -> module under specrig.cli (imported only when the command runs)
COMMANDS: dict[str, str] = {
    "lock": "lock",
    "env": "env",
    "bundle": "bundle",
    "kit": "kit",
    "bench": "bench",
    "report": "report",
    "project": "project",
    "results": "results",
    "build": "build",
    "tu-probe": "tu_probe",
    "repack": "repack",
    "patch": "patch",
    "drafter-check": "drafter_check",
    "drafter": "drafter",
    "drafter-eval": "drafter_eval",
    "study": "study",
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{COMMANDS[name]}")


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = "\n".join(f"  {name:<{width}}  {_module(name).HELP}" for name in COMMANDS)
    return f"usage: specrig COMMAND [options]   (specrig COMMAND --help)\n\ncommands:\n{lines}"


def parser_for(name: str) -> argparse.ArgumentParser:
    """The argument parser of one command (``specrig NAME --help``)."""
    mod = _module(name)
    p = argparse.ArgumentParser(
        prog=f"specrig {name}",
        description=getattr(mod, "DESCRIPTION", mod.HELP),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mod.add_arguments(p)
    return p


def report_error(exc: SpecrigError) -> int:
    """Print a SpecrigError the one way specrig prints errors; return its exit code."""
    log.error(exc.message)
    if exc.hint:
        log.console.print(f"  [bold]hint:[/] {escape(exc.hint)}")
    return exc.exit_code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"specrig: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    name = argv[0]
    args = parser_for(name).parse_args(argv[1:])
    args.argv = argv[1:]  # as typed (a detached build starts the same command again)
    interrupts.install()
    try:
        return _module(name).run(args)
    except SpecrigError as exc:
        return report_error(exc)
    except BrokenPipeError:  # the reader went away (`specrig build NAME --status | head`): not specrig's fault
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush cannot fail again
        return 141  # as a program killed by SIGPIPE
    except OSError as exc:  # a full disk, a read-only filesystem, a file where a folder should be: named
        named = os_error(exc, None, f"specrig {name}", "name another folder (the cache: SPECRIG_CACHE_DIR=DIR)")
        if named is None:
            raise
        return report_error(named)
    except KeyboardInterrupt as exc:
        log.error(f"interrupted ({interrupts.received()}): every process specrig started is stopped")
        return interrupts.exit_code(exc)
    finally:
        stopped = interrupts.stop_descendants()
        if stopped:
            log.warn(f"stopped {len(stopped)} process(es) specrig had started: {', '.join(stopped)}")
