"""``wf simulate`` and ``wf replay``: the deterministic simulation and input logs.

``wf simulate --seed N [--steps M] [--seeds K] [--record LOG]`` runs the
seeded simulation of :mod:`wf.testing.simulation` for seeds ``N .. N+K-1``
and prints one summary line per seed. A broken invariant prints the
violation, with its one-line reproduction command, to stderr; every seed
still runs, and the exit code is 1. ``--record LOG`` (one seed only) writes
the run's input log: the whole run, or the part since the last scheduler
restart, which starts from the snapshot taken right after recovery.

``wf replay LOG`` feeds a recorded log to a fresh (or restored) core and
prints its decision stream, one JSON line per command. A log that cannot be
read or decoded prints one line ``wf: error: <reason>`` and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from wf.errors import WfError
from wf.scheduler.replay import decode_log, replay, start_core
from wf.testing.invariants import InvariantViolation
from wf.testing.simulation import STEPS_DEFAULT, simulate

USAGE_ERROR_EXIT: int = 2
"""Exit code for invalid input (argparse uses the same)."""
VIOLATION_EXIT: int = 1
"""Exit code when an invariant broke."""
SEEDS_MAX: int = 1_000_000
"""Most seeds one ``wf simulate`` runs."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``simulate`` and ``replay`` to the ``wf`` parser."""
    sim = subparsers.add_parser(
        "simulate",
        help="run the deterministic scheduler simulation",
        description="Run the seeded simulation of the scheduler core, its workers and "
        "their faults, checking every invariant after every command.",
    )
    sim.add_argument("--seed", type=int, required=True, help="the (first) seed")
    sim.add_argument(
        "--steps", type=int, default=STEPS_DEFAULT, help=f"commands per run ({STEPS_DEFAULT})"
    )
    sim.add_argument("--seeds", type=int, default=1, help="how many seeds, from --seed (1)")
    sim.add_argument("--record", metavar="LOG", help="write the input log (one seed only)")
    sim.set_defaults(handler=run_simulate)
    rep = subparsers.add_parser(
        "replay",
        help="replay a recorded input log",
        description="Replay a recorded input log into a fresh core and print the "
        "decision stream, one JSON line per command.",
    )
    rep.add_argument("log", metavar="LOG", help="input log (JSON lines)")
    rep.set_defaults(handler=run_replay)


def _usage_error(message: str) -> int:
    print(f"wf: error: {' '.join(message.split())}", file=sys.stderr)
    return USAGE_ERROR_EXIT


def run_simulate(args: argparse.Namespace) -> int:
    """Handler of ``wf simulate``; returns the exit code."""
    if args.steps < 1:
        return _usage_error(f"--steps must be at least 1, got {args.steps}")
    if not 1 <= args.seeds <= SEEDS_MAX:
        return _usage_error(f"--seeds must be 1..{SEEDS_MAX}, got {args.seeds}")
    if args.record is not None and args.seeds != 1:
        return _usage_error("--record needs a single seed (--seeds 1)")
    status = 0
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            result = simulate(seed, steps=args.steps)
        except InvariantViolation as exc:
            print(f"seed={seed} VIOLATION {exc}", file=sys.stderr)
            status = VIOLATION_EXIT
            continue
        print(result.summary(), flush=True)
        if args.record is not None:
            try:
                Path(args.record).write_bytes(result.log())
            except OSError as exc:
                return _usage_error(f"cannot write {args.record}: {exc.strerror or exc}")
            if len(result.segments) > 1:
                print(
                    f"recorded {len(result.segments[-1].commands)} commands since the last "
                    f"of {result.counts.restarts} restarts",
                    file=sys.stderr,
                )
    return status


def run_replay(args: argparse.Namespace) -> int:
    """Handler of ``wf replay``; returns the exit code."""
    try:
        data = Path(args.log).read_bytes()
    except OSError as exc:
        return _usage_error(f"cannot read {args.log}: {exc.strerror or exc}")
    try:
        header, commands = decode_log(data)
    except WfError as exc:
        return _usage_error(f"{args.log}: {exc.message}")
    try:
        core = start_core(header)
    except Exception as exc:  # A snapshot that decodes but does not restore is malformed too.
        return _usage_error(f"{args.log}: the starting snapshot does not restore: {exc}")
    out = sys.stdout
    try:
        for line in replay(core, commands):
            out.write(line.decode())
            out.write("\n")
        out.flush()
    except BrokenPipeError:
        # The reader went away (``wf replay LOG | head``): not an error of ours.
        _silence_stdout()
    return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
