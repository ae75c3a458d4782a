"""python -m grader.instructor init|grade|learner-env: an nbgrader course from this repository.

Exit status: 0 done; 1 with a one-line error naming the fix (or, for grade, when some
submissions could not be graded: one line per student on stderr); 2 usage error; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..cases import DEFAULT_SEED
from ..isolation.runner import Limits
from . import InstructorError
from .learner_env import TORCH_CPU_INDEX

DESCRIPTION = """\
Run this course on nbgrader, graded by the sandboxed grader. docs/instructor.md walks a term:

  init COURSE_DIR          source/ from solutions/, release/ by nbgrader generate_assignment
  grade COURSE_DIR         submitted/* graded by our grader, scores into nbgrader's gradebook
  learner-env --for N      a wheel for the learners' kernels opening notebook N: no grader,
                           the reference of the notebooks before N (or --through N: up to N)
"""


def _parser() -> argparse.ArgumentParser:
    d = Limits()
    p = argparse.ArgumentParser(prog="python -m grader.instructor", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    i = sub.add_parser("init", help="create or update an nbgrader course directory")
    i.add_argument("course", type=Path, metavar="COURSE_DIR")
    i.add_argument("--assignments", metavar="NAMES",
                   help="comma-separated notebooks, e.g. 01_attention,02_multi_head_attention (default: all)")
    i.add_argument("--course-id", help="nbgrader course_id written into a new nbgrader_config.py "
                                       "(default: tfcourse)")
    i.add_argument("--exchange", metavar="DIR",
                   help="nbgrader's exchange folder written into a new nbgrader_config.py and created "
                        "if missing (default: nbgrader's /usr/local/share/nbgrader/exchange)")
    g = sub.add_parser("grade", help="grade submitted/ into nbgrader's gradebook")
    g.add_argument("course", type=Path, metavar="COURSE_DIR")
    g.add_argument("--assignment", metavar="A", help="grade this assignment only (default: all)")
    g.add_argument("--student", metavar="S", help="grade this student's submissions only (default: all)")
    g.add_argument("--jobs", type=int, default=1, metavar="N", help="submissions graded in parallel (default: 1)")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="grade on this Dask cluster, e.g. tcp://10.0.0.5:8786 (docs/scale.md); "
                        "the gradebook is written here")
    g.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    g.add_argument("--sandbox", choices=("auto", "bwrap", "unshare", "none"), default=None,
                   help="as for python -m grader (default: $TFCOURSE_SANDBOX or auto, bubblewrap required)")
    g.add_argument("--timeout", type=float, default=d.timeout, metavar="SECONDS")
    g.add_argument("--memory", type=int, default=None, metavar="MIB")
    g.add_argument("--seed", type=int, default=DEFAULT_SEED)
    g.add_argument("--force", action="store_true", help="grade again submissions already graded unchanged")
    g.add_argument("--lock-wait", type=float, default=60, metavar="SECONDS",
                   help="how long to retry while the gradebook is locked (default: 60)")
    e = sub.add_parser("learner-env", help="build what to install in the learners' kernels")
    which = e.add_mutually_exclusive_group(required=True)
    which.add_argument("--for", dest="opening", metavar="NN_topic",
                       help="the notebook the learners open next, e.g. 05_feed_forward: the reference of "
                            "every notebook before it (its imports cell needs them), not its own")
    which.add_argument("--through", metavar="NN_topic",
                       help="the last notebook whose reference code the learners may have, e.g. 01_attention")
    e.add_argument("--out", type=Path, default=Path("dist"), help="output folder (default: dist/)")
    e.add_argument("--folder", action="store_true", help="write a tfcourse/ folder instead of a wheel")
    e.add_argument("--download", action="store_true",
                   help="also download every dependency's wheel into --out, for an offline "
                        "`pip install --no-index --find-links OUT` (pip's own index or mirror)")
    e.add_argument("--torch-index", default=TORCH_CPU_INDEX, metavar="URL",
                   help="with --download: where torch (at requirements.txt's pin) comes from, e.g. your "
                        f"mirror of it; 'none' leaves torch out (default: {TORCH_CPU_INDEX})")
    return p


def _learner_env(args, parser) -> int:
    from .course import course_notebooks
    from .learner_env import build, download, opens

    if args.download and args.folder:
        parser.error("--download goes with a wheel, not --folder")
    path = build(args.through, args.out, folder=args.folder, opening=args.opening)
    print(path)
    from .learner_env import INFO

    info = path / INFO if args.folder else None
    keep = json.loads(info.read_text())["reference"] if info else None
    if keep is None:
        import zipfile

        with zipfile.ZipFile(path) as whl:
            keep = json.loads(next(whl.read(n) for n in whl.namelist() if n.endswith(f"/{INFO}")))["reference"]
    works = opens(keep, course_notebooks())
    print(f"reference of {', '.join(keep)}; opens notebooks {', '.join(n.split('_', 1)[0] for n in works)} "
          f"(a notebook's imports cell needs earlier notebooks' reference)")
    if args.download:
        index = None if args.torch_index.lower() == "none" else args.torch_index
        for command in download(path, args.out, torch_index=index):
            print(f"ran {command}")
        print(f"offline install: pip install --no-index --find-links {args.out} "
              f"{'torch ' if index else ''}{path.name.split('-')[0]}=={path.name.split('-')[1]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "init":
            from .course import init

            return init(args.course, args.assignments, args.course_id, exchange=args.exchange)
        if args.command == "learner-env":
            return _learner_env(args, parser)
        if args.jobs < 1 or args.timeout <= 0 or (args.memory is not None and args.memory < 0):
            parser.error("--jobs, --timeout must be positive; --memory must be >= 0")
        from tfcourse.device import get_device

        from ..isolation import sandbox
        from .grade import grade

        if args.sandbox:
            os.environ[sandbox.ENV_VAR] = args.sandbox
        device = str(get_device(args.device))
        memory = args.memory if args.memory is not None else (0 if device.startswith("cuda") else Limits().memory_mb)
        limits = Limits(timeout=args.timeout, memory_mb=memory)
        return grade(args.course, assignment=args.assignment, jobs=args.jobs, device=device, seed=args.seed,
                     force=args.force, lock_wait=args.lock_wait, limits=limits, student=args.student,
                     scheduler=args.scheduler)
    except InstructorError as exc:
        print(f"grader.instructor: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # e.g. --device cuda without CUDA
        print(f"grader.instructor: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
