"""python -m grader: grade course notebooks, one submission or a whole class.

Exit status: 0 whenever grading ran (whatever the scores), 2 for a usage error, 1 with one line
on stderr when the grader itself could not do its job (no course files, no CUDA, unwritable
report).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from pathlib import Path

_EXIT_STATUS: list[int] = []


def _exit_without_teardown() -> None:
    """Once ``main`` has returned (every report written, every child reaped), end the process
    without the interpreter's teardown, which frees torch's and transformers' objects one by one
    (about 2 s of a command). Registered before anything else is imported, so every other exit
    handler (the zygotes', the temporary folders' finalizers) has run by then."""
    if not _EXIT_STATUS:
        return  # main raised: the usual exit, traceback and all
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(_EXIT_STATUS[0])


if __name__ == "__main__":
    atexit.register(_exit_without_teardown)
    # nbformat (the notebooks) imports jsonschema, which imports its optional IRI format checker
    # rfc3987_syntax when installed (jupyter-events' jsonschema[format-nongpl] installs it): 39 lark
    # grammars compiled, about 2 s of every command. No schema the grader validates checks an IRI
    # format, so this process skips it (jsonschema then has no "iri" checker, as without the extra).
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

from .isolation.limits import Limits  # noqa: E402  (both light: torch is imported later)
from .names import DEFAULT_SEED  # noqa: E402

DESCRIPTION = """\
Grade Transformer-course notebooks against the reference solutions.

A SUBMISSION is a folder holding one learner's notebooks under the course's file names
(searched recursively, so nbgrader's submitted/<student>/<assignment>/ works), or one .ipynb.
Default: notebooks/ (a learner checking their own progress). Several submissions = a batch;
each gets its own row. Learner code runs in a separate process per notebook with the limits
below; the verdict is decided in this process. See docs/grading.md.
"""


def _parser() -> argparse.ArgumentParser:
    d = Limits()
    p = argparse.ArgumentParser(prog="python -m grader", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("submissions", nargs="*", metavar="SUBMISSION", help="folders or .ipynb files (default: notebooks/)")
    p.add_argument("--notebooks", metavar="NAMES", help="comma-separated notebooks to grade, e.g. 01_attention (default: all)")
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu", help="where learner code runs (default: cpu)")
    p.add_argument("--sandbox", choices=("auto", "bwrap", "unshare", "none"), default=None,
                   help="isolation of learner code (default: $TFCOURSE_SANDBOX or auto, the strongest that "
                        "works here: bubblewrap, then unshare, then none; see docs/grading.md)")
    p.add_argument("--timeout", type=float, default=d.timeout, metavar="SECONDS",
                   help=f"CPU-time limit per exercise, enforced by killing the sandboxed child; code that waits "
                        f"is stopped at {d.wall_factor:g}x that of wall-clock time (default: {d.timeout:g})")
    p.add_argument("--memory", type=int, default=None, metavar="MIB",
                   help=f"memory limit in MiB, 0 for none: address space of each learner process on CPU, "
                        f"and resident memory of all of them together (default: {d.memory_mb} on CPU, none with CUDA)")
    p.add_argument("--output", type=int, default=d.output_kb, metavar="KIB",
                   help=f"learner output kept per notebook, KiB; the rest is discarded (default: {d.output_kb})")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="submissions graded in parallel, or the notebooks of a single submission (default: 1)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="grade on a Dask distributed cluster (e.g. tcp://10.0.0.5:8786), one task per "
                        "submission; default: this machine (see docs/scale.md)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"seed of the hidden cases (default: {DEFAULT_SEED})")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the JSON report")
    p.add_argument("--csv", type=Path, metavar="FILE", help="write a CSV gradebook: one row per submission")
    p.add_argument("--feedback", type=Path, metavar="DIR", help="write one feedback file per submission")
    p.add_argument("--quiet", action="store_true", help="don't print the table")
    p.add_argument("--strict", action="store_true",
                   help="refuse to grade with weaker isolation than bubblewrap unless --sandbox names the "
                        "weaker mode (always on for a batch of several submissions)")
    p.add_argument("--doctor", action="store_true",
                   help="say which sandbox would be used and why, whether CUDA is seen, the torch/nbgrader "
                        "versions and whether the course files are consistent; grade nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.timeout <= 0 or args.jobs < 1 or args.output < 0 or (args.memory is not None and args.memory < 0):
        parser.error("--timeout, --jobs must be positive; --memory, --output must be >= 0")

    # Imported here so `--help` and usage errors are instant.
    from tfcourse.device import get_device

    from .course import CourseError, load_course
    from .isolation import sandbox

    if args.sandbox:
        os.environ[sandbox.ENV_VAR] = args.sandbox
    if args.doctor:
        from .doctor import doctor

        return doctor(device=args.device)
    submissions = args.submissions or ["notebooks"]
    # A batch (or --strict) never falls back silently: without bubblewrap it stops here, before
    # grading, unless the weaker mode was asked for by name (then every row says which).
    strict = args.strict or len(submissions) > 1
    _start_zygotes(args, len(submissions), strict)
    try:
        course = load_course()
        device = str(get_device(args.device))
        isolation = sandbox.choose(strict=strict)
    except (CourseError, RuntimeError) as exc:
        print(f"grader: {exc}", file=sys.stderr)
        return 1
    _protect_around(submissions, args)
    notebooks = _chosen_notebooks(parser, args.notebooks, course)
    for s in submissions:
        if not Path(s).exists():
            print(f"grader: warning: {s} does not exist; its row will show every notebook missing", file=sys.stderr)
    memory = args.memory if args.memory is not None else (0 if device.startswith("cuda") else Limits().memory_mb)
    limits = Limits(timeout=args.timeout, memory_mb=memory, output_kb=args.output)

    finished, interrupted = _grade(submissions, args, notebooks=notebooks, device=device, limits=limits)
    report = _report(submissions, finished, interrupted, seed=args.seed, device=device,
                     sandbox_mode=isolation.mode, limits=limits)
    rows = report["submissions"]
    if not args.quiet:
        _show(report)
    if not _write_reports(report, args):
        return 1
    if interrupted:
        print(f"grader: {interrupted}; the reports hold the {len(rows)} of {len(submissions)} submissions "
              "graded before it", file=sys.stderr)
        return 130 if interrupted.startswith("interrupted") else 1
    return 0


def _start_zygotes(args: argparse.Namespace, count: int, strict: bool) -> None:
    """Start the fast path's zygotes now, before this process imports torch and reads the course,
    so that their start (a sandbox, importing torch: 2-3 s) overlaps that work (issue 30). CPU
    grading on this machine only; anything that goes wrong here is left to the normal start,
    which reports it."""
    if args.scheduler is not None or args.device != "cpu":
        return
    from .isolation import fastpath, sandbox

    try:
        fastpath.prestart(fastpath.zygotes_for(args.jobs, count), sandbox.choose(strict=strict), "cpu")
    except Exception:  # noqa: BLE001 - reported by sandbox.choose below
        return


def _protect_around(submissions: list[str], args: argparse.Namespace) -> None:
    """The unshare sandbox covers these too: the folders around the submissions (other learners'
    work) and the folders the reports go to."""
    from .isolation import views

    around = [Path(s).resolve() for s in submissions]
    around += [p.resolve().parent for p in (args.json, args.csv) if p is not None]
    around += [args.feedback.resolve()] if args.feedback is not None else []
    views.protect([*around, *(p.parent for p in around)])


def _chosen_notebooks(parser: argparse.ArgumentParser, names: str | None, course) -> list[str] | None:
    """The notebooks --notebooks names (None: all); a usage error for one the course lacks."""
    if not names:
        return None
    notebooks = [n.strip().removesuffix(".ipynb") for n in names.split(",") if n.strip()]
    unknown = [n for n in notebooks if n not in course]
    if unknown:
        parser.error(f"unknown notebook(s) {', '.join(unknown)}; the course has {', '.join(course)}")
    return notebooks


def _grade(submissions: list[str], args: argparse.Namespace, *, notebooks: list[str] | None, device: str,
           limits: Limits) -> tuple[dict[int, dict], str]:
    """Grade the batch: (the rows finished, by submission index; why it stopped early, or "")."""
    from . import report as rep
    from .batch import grade_batch

    # Rows are kept as they come back; the reports are written once at the end (each file replaced
    # atomically), with every row finished so far also after Ctrl-C or a failure of the batch.
    finished: dict[int, dict] = {}

    def keep(index: int, row: dict) -> None:
        finished[index] = rep.clean(row)

    interrupted = ""
    try:
        grade_batch(submissions, notebooks=notebooks, device=device, limits=limits, seed=args.seed,
                    jobs=args.jobs, scheduler=args.scheduler, quiet=args.quiet, on_row=keep)
    except KeyboardInterrupt:
        interrupted = "interrupted (Ctrl-C)"
    except Exception as exc:  # the batch itself failed (a sandbox that stopped working): keep the rows
        interrupted = f"the batch stopped: {type(exc).__name__}: {str(exc).strip()[:200]}"
    return finished, interrupted


def _report(submissions: list[str], finished: dict[int, dict], interrupted: str, *, seed: int, device: str,
            sandbox_mode: str, limits: Limits) -> dict:
    """The batch's report: its rows in submission order, and what was not graded if it stopped early."""
    from . import report as rep

    rows = [finished[i] for i in sorted(finished)]
    report = {"submissions": rows, "seed": seed, "device": device, "sandbox": sandbox_mode,
              "limits": {"timeout_s": limits.timeout, "memory_mb": limits.memory_mb, "output_kb": limits.output_kb}}
    report["limited"] = rep.limited(report)
    if interrupted:
        report["interrupted"] = interrupted
        report["not_graded"] = [rep.clean(str(s)) for i, s in enumerate(submissions) if i not in finished]
    return report


def _show(report: dict) -> None:
    """The table; for a single submission (a learner checking their progress) also what to fix."""
    from . import report as rep

    rows = report["submissions"]
    print(rep.table(report))
    if len(rows) == 1:  # a learner checking their progress: show what to fix
        details = [ex["feedback"] for nb in rows[0]["notebooks"] for ex in nb["exercises"]
                   if ex["status"] in ("failed", "error", "timeout")]
        if details:
            print("\n" + "\n\n".join(details))
    summary = rep.limited_summary(report)
    if summary:
        print("\n" + summary)


def _write_reports(report: dict, args: argparse.Namespace) -> bool:
    """Write the reports asked for; False (after one line on stderr) when one could not be written."""
    from . import report as rep

    try:
        if args.json:
            rep.write_json(report, args.json)
        if args.csv:
            rep.write_csv(report, args.csv)
        if args.feedback:
            rep.write_feedback(report, args.feedback)
    except OSError as exc:
        print(f"grader: could not write a report: {exc}", file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    status = main()
    _EXIT_STATUS.append(status if isinstance(status, int) else 0)
    sys.exit(status)
