"""``specrig study`` (``nox -s study -- ...``): several specrig commands run as one study, from a
study file (TOML), into one folder (docs/study.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

HELP = "run a study file's steps (bench, drafter, report, ...) into one folder, resumable, detachable"
DESCRIPTION = (
    "A study file lists steps, each a specrig command with its options as a table. Every step is checked by its\n"
    "command's own parser and models before anything runs; the steps run in order into one study folder (default:\n"
    "$SPECRIG_CACHE_DIR/studies/NAME); a rerun skips the steps whose inputs and outputs are unchanged.\n"
    "  specrig study check FILE               the plan, every option checked, nothing run\n"
    "  specrig study run FILE [--detach]      run it (--detach: in the background, outliving the terminal)\n"
    "  specrig study run FILE --steps A,B     only the steps named (what they read must have finished)\n"
    "  specrig study status|follow|stop DIR|NAME\n"
    "  specrig study pack DIR --split-mb N --out DIR    and    specrig study unpack VOLUMES --out DIR"
)


STEPS_HELP = (
    "NAME[,NAME...]: only these steps (the names check prints); a step they read must be among them "
    "or have finished in the study folder"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = sub.add_parser("check", help="check the study file and print its plan; run nothing")
    check.add_argument("file", type=Path, help="the study file (study.toml)")
    check.add_argument("--out", type=Path, help="the study folder (default: $SPECRIG_CACHE_DIR/studies/NAME)")
    check.add_argument("--steps", help=STEPS_HELP)
    run = sub.add_parser("run", help="run the study's steps in order into its folder")
    run.add_argument("file", type=Path, help="the study file (study.toml)")
    run.add_argument("--out", type=Path, help="the study folder (default: $SPECRIG_CACHE_DIR/studies/NAME)")
    run.add_argument("--steps", help=STEPS_HELP)
    run.add_argument("--dry-run", action="store_true", help="print what would run (as check does); run nothing")
    run.add_argument("--detach", action="store_true", help="run in the background, in a session of its own")
    run.add_argument("--state-file", type=Path, help=argparse.SUPPRESS)  # set by --detach for the run it starts
    for name, what in (
        ("status", "print a study's state: each step's status"),
        ("follow", "print a detached study's progress until it ends"),
        ("stop", "stop a detached study: its process group and every step's command (servers included)"),
    ):
        s = sub.add_parser(name, help=what)
        s.add_argument("study", help="the study folder, or the name of a study in $SPECRIG_CACHE_DIR/studies")
    pack = sub.add_parser("pack", help="pack a study folder's results (no model weights) into volumes")
    pack.add_argument("study", help="the study folder, or a study's name")
    pack.add_argument("--split-mb", type=int, required=True, metavar="N", help="volumes of at most N MB (10^6 bytes)")
    pack.add_argument("--out", type=Path, help="where the volumes go (default: STUDY-packed beside the study)")
    unpack = sub.add_parser("unpack", help="read packed volumes back into a study folder")
    unpack.add_argument("volumes", type=Path, help="the folder holding the volumes (vol-001, ...)")
    unpack.add_argument("--out", type=Path, required=True, help="the study folder to make")


def _plan(args: argparse.Namespace):
    from specrig.cli.study_argv import StudyCommandLine
    from specrig.study.plan import make_plan

    plan = make_plan(args.file, StudyCommandLine(), args.out)
    if args.steps:
        from specrig.study.run import select_steps

        plan = select_steps(plan, [n.strip() for n in args.steps.split(",") if n.strip()])
    return plan


def run(args: argparse.Namespace) -> int:
    from specrig.core.log import log
    from specrig.study.run import run_study

    if args.action == "check" or (args.action == "run" and args.dry_run):
        plan = _plan(args)
        run_study(plan, dry_run=True)
        log.step(f"{args.file}: valid, {len(plan.to_run)} steps; nothing was run")
        return 0
    if args.action == "run":
        plan = _plan(args)
        if args.detach:
            return _detach(args, plan)
        if args.state_file:
            from specrig.study.detached import reporting

            with reporting(args.state_file):
                run_study(plan)
            return 0
        run_study(plan)
        return 0
    return _elsewhere(args)


def _detach(args: argparse.Namespace, plan) -> int:
    from specrig.core.log import log
    from specrig.study.detached import start
    from specrig.study.run import prepare_folder

    folder = prepare_folder(plan)
    argv = ["study", *(a for a in args.argv if a != "--detach")]
    if args.out is None:
        argv += ["--out", str(folder)]
    console = folder / f"study-{time.strftime('%Y%m%d-%H%M%S')}.console.log"
    state = start(argv, folder, console)
    log.step(f"study {plan.meta.name}: started detached, pid {state['pid']} (output {console})")
    log.info(f"follow it: specrig study follow {folder}   stop it: specrig study stop {folder}")
    return 0


def _elsewhere(args: argparse.Namespace) -> int:
    """status, follow, stop, pack and unpack: a study folder given by path or name."""
    from specrig.study import detached

    if args.action == "unpack":
        from specrig.study.pack import unpack

        print(unpack(args.volumes, args.out))
        return 0
    folder = detached.find(args.study)
    if args.action == "pack":
        from specrig.core.errors import ConfigError
        from specrig.study.pack import pack

        if args.split_mb < 1:
            raise ConfigError(
                f"--split-mb {args.split_mb}: a volume must hold at least 1 MB", hint="--split-mb 1 or more"
            )
        print(pack(folder, args.out or folder.with_name(folder.name + "-packed"), split_mb=args.split_mb))
        return 0
    if args.action == "stop":
        state = detached.stop(folder)
    elif args.action == "follow":
        try:
            state = detached.follow(folder)
        except KeyboardInterrupt as exc:  # only the watching ends: the study is not this process's child
            from specrig.core import interrupts
            from specrig.core.log import log

            log.info(f"stopped following ({interrupts.received()}); the study goes on: specrig study stop {folder}")
            return interrupts.exit_code(exc)
    else:
        state = detached.status(folder)
    print(detached.render(folder, state))
    return detached.exit_code(state)
