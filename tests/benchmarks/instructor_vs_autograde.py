"""Time `python -m grader.instructor grade` against `nbgrader autograde` on the same 3 students.

    python tests/benchmarks/instructor_vs_autograde.py              # 3 repeats
    python tests/benchmarks/instructor_vs_autograde.py --repeats 5

A temporary course built with `python -m grader.instructor init --assignments
01_attention,02_multi_head_attention` (untimed) holds the three students of tests/test_instructor.py:
`full`, `partial` (an inverted mask in notebook 01) and `hostile` (notebook 01's softmax wrong and
every check of its kernel replaced by a no-op); the demo cells deleted, as in that test. Each
repeat, alternating the order (it flips every repeat), times the whole of:

* `python -m grader.instructor grade COURSE --force` (`--jobs 1`, and `--jobs 2`): 6 notebooks
  through the sandboxed grader, written into the gradebook and autograded/;
* `nbgrader autograde 01_attention --force` then `... 02_multi_head_attention --force`, in a copy
  of the same course: the same 6 notebooks executed in kernels, scores into its gradebook.

Every timed run must give the scores the test expects (ours: 8 for hostile's notebook 01;
nbgrader's: 10, it is fooled), or the script stops. One untimed warm-up of each comes first. The
output is a markdown table: wall-clock and CPU medians, min-max, ratios to `grade --jobs 1`, and
the machine (with the load average: the machine may be shared). A script, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from grader_vs_nbgrader import alternate, environment, repeats_option, run, timing_table  # noqa: E402

NB1, NB2 = "01_attention", "02_multi_head_attention"
EXPECTED = {  # (assignment, student) -> (ours, nbgrader's)
    (NB1, "full"): (10, 10), (NB1, "partial"): (7.5, 7.5), (NB1, "hostile"): (8, 10),
    (NB2, "full"): (10, 10), (NB2, "partial"): (10, 10), (NB2, "hostile"): (10, 10),
}


def scores(course: Path) -> dict[tuple[str, str], float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "tfcourse") as gb:
        return {(a, s): gb.find_submission(a, s).score for a, s in EXPECTED}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    repeats_option(parser, 3)
    args = parser.parse_args(argv)
    from grader.instructor.__main__ import main as instructor
    from tests.test_instructor import HOSTILE_SOFTMAX, _submit
    from tests.test_nbgrader_roundtrip import INVERTED_MASK_SDPA, _with_cells

    tmp = Path(tempfile.mkdtemp(prefix="instructor-vs-autograde-"))
    try:
        env = environment(tmp)
        ours, theirs = tmp / "course", tmp / "nbgrader-course"
        print("init (untimed) ...", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the markdown table
            status = instructor(["init", str(ours), "--assignments", f"{NB1},{NB2}"])
        if status != 0:
            sys.exit("init failed")
        for name in (NB1, NB2):
            released = nbformat.read(ours / "release" / name / f"{name}.ipynb", as_version=4)
            source = nbformat.read(ours / "source" / name / f"{name}.ipynb", as_version=4)
            _submit(ours, "full", name, _with_cells(released, source, {}))
            _submit(ours, "partial", name, _with_cells(released, source, {"scaled_dot_product_attention":
                                                                          INVERTED_MASK_SDPA} if name == NB1 else {}))
            _submit(ours, "hostile", name, _with_cells(released, source,
                                                       {"softmax": HOSTILE_SOFTMAX} if name == NB1 else {}))
        shutil.copytree(ours, theirs)
        grade = [sys.executable, "-m", "grader.instructor", "grade", str(ours), "--force"]
        nbgrader = [sys.executable, "-m", "nbgrader", "autograde"]
        commands = {
            "grade --jobs 1": ([grade], ours, 0),
            "grade --jobs 2": ([[*grade, "--jobs", "2"]], ours, 0),
            "nbgrader autograde (01, then 02)": ([[*nbgrader, NB1, "--force"], [*nbgrader, NB2, "--force"]],
                                                 theirs, 1),
        }
        def measure(name: str) -> tuple[float, float]:
            cmds, course, which = commands[name]
            wall = cpu_s = 0.0
            for cmd in cmds:
                w, c = run(cmd, course, env)
                wall, cpu_s = wall + w, cpu_s + c
            got = scores(course)
            want = {k: v[which] for k, v in EXPECTED.items()}
            if got != want:
                sys.exit(f"{name} gave {got}, expected {want}: not timing a wrong result")
            return wall, cpu_s

        order = list(commands)
        times, cpu = alternate(order, args.repeats, measure)
        timing_table(f"3 students x 2 notebooks (6 submissions), {args.repeats} timed runs of each after one "
                     "warm-up, alternating. Ratios: of the medians.", times, cpu, order[0],
                     ["hostile's notebook 01"], lambda name, _: [f"{EXPECTED[(NB1, 'hostile')][commands[name][2]]}/10"])
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
