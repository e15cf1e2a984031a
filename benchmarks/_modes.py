"""The run modes every benchmark script takes, in one place: full (the default), ``--quick``
and ``--smoke``; and ``--timing`` (fresh worker, in one process, or both).

``--quick`` is each script's small grid (the committed ``*_quick`` results and the pages
that cite them were made with it).  ``--smoke`` is CI's check that a script still works,
and nothing more: the smallest inputs that still walk every code path of the script
(every method, every report and plot writer, the correctness checks before timing), one
timed repetition and no warm-up beyond the correctness run, and a script's fresh-process
machinery (workers, spawned ranks, memory children) started once.  Its numbers mean
nothing; its results are written under ``--out`` as ``<name>_smoke.*`` like the others.

Needs no torch: the drivers that only start workers import it without loading torch.
"""
import argparse

MODES = ("full", "quick", "smoke")
SMOKE_HELP = ("CI's smoke run: the smallest inputs through every code path, one timed repetition, "
              "no warm-up, worker processes started once; the numbers mean nothing")

# the settings every script's smoke mode shares
SMOKE_REPS = 1                 # timed repetitions per phase
SMOKE_WARMUP = 0               # warm-up runs beyond the correctness run
SMOKE_LOAD_SAMPLE_S = 0.05     # seconds of /proc/stat sampling for the machine's background load
# in one process, side by side (_harness.time_in_process): the MB its warm-up allocates and
# frees like a training step; the smoke mode's still holds one block over glibc's 32 MiB
WARM_MB = 384
SMOKE_WARM_MB = 48


def add_mode_args(ap: argparse.ArgumentParser, quick_help: str = None) -> None:
    """--quick and --smoke (one or the other; neither: the full mode)."""
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help=quick_help)
    group.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


TIMINGS = ("both", "fresh", "in-process")


def add_timing_arg(ap: argparse.ArgumentParser, fresh: str) -> None:
    """--timing: how the methods are timed against each other; `fresh` says what the
    script's own-loop timing is (a fresh worker, or its driver process)."""
    ap.add_argument("--timing", choices=TIMINGS, default="both",
                    help=f"fresh: {fresh}; in-process: all methods of a case side by side in one used process "
                         "(a training-like allocation first), interleaved round by round, with CPU time and page "
                         "faults per call; both (the default): the two, reported side by side")


def mode_of(args: argparse.Namespace) -> str:
    """"smoke", "quick" or "full" from the parsed arguments."""
    if getattr(args, "smoke", False):
        return "smoke"
    return "quick" if args.quick else "full"


def load_sample_s(mode: str, full: float = 1.0) -> float:
    """How long background_load samples: `full` in the quick and full modes, a blink in smoke."""
    return SMOKE_LOAD_SAMPLE_S if mode == "smoke" else full
