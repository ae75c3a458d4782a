"""CONTRIBUTING.md's "Add a notebook", followed for a skeleton notebook in a copy of the repository:
the new notebook is built, its check runs in-process, its protocol, catalogue and proportional-points
tests pass, and the grader grades it (the solutions full marks, the released stub `not_attempted`,
a wrong answer `failed` with its hint, a correct computation without its `ValueError` the core
cell's points only). If this test needs another file than the steps name, the steps are wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import nbformat
import pytest

from tests.test_self_grading import _clone

pytestmark = pytest.mark.slow

NAME = "09_skeleton"

SOLUTION = '''\
def double(x: torch.Tensor) -> torch.Tensor:
    """Twice ``x``, any shape and floating dtype; ValueError for another dtype."""
    ### BEGIN SOLUTION
    if not x.is_floating_point():
        raise ValueError(f"double takes a floating-point tensor, not {x.dtype}")
    return 2 * x
    ### END SOLUTION
'''

TEST_CELL = '''\
check_double(double, part="{part}")
### BEGIN HIDDEN TESTS
from grader.cases import check_hidden
check_hidden("09_skeleton", "double", double, part="{part}")
### END HIDDEN TESTS
'''
NO_VALIDATION = "def double(x):\n    return 2 * x\n"

FILES = {
    "tfcourse/checks/nb09_skeleton/__init__.py": '''
        """Checks for notebook 09, a skeleton."""

        from __future__ import annotations

        from .cases import NOTEBOOK
        from .mistakes import MISTAKES

        __all__ = ["MISTAKES", "NOTEBOOK", *NOTEBOOK.export(globals())]
    ''',
    "tfcourse/checks/nb09_skeleton/mistakes.py": '''
        """Known wrong implementations of notebook 09's exercises."""

        from __future__ import annotations

        from ..hints import Mistake

        MISTAKES = {"double": (Mistake("squared", "multiply by 2, don't square", lambda x: x * x),
                               Mistake("halved", "multiply by 2, don't divide", lambda x: x / 2))}
        VALIDATION_HINT = "check x.is_floating_point() first and raise ValueError otherwise"
    ''',
    "tfcourse/checks/nb09_skeleton/cases.py": '''
        """Notebook 09's visible cases."""

        from __future__ import annotations

        import torch

        from ..call import Call
        from ..case import Case, Judge
        from ..protocol import NotebookChecks
        from .mistakes import MISTAKES, VALIDATION_HINT

        NOTEBOOK = NotebookChecks("09_skeleton")


        @NOTEBOOK.exercise("double", parts=("core", "validation"))
        def _double_cases() -> list[Case]:
            """Check ``double(x)`` = 2·x, and ValueError for an integer tensor."""
            x = torch.linspace(-3, 3, 7, dtype=torch.float64)

            def judge(j: Judge) -> None:
                j.close(j.tensor(shape=(7,), dtype=torch.float64), x + x, oracle="x + x")

            def rejects(j: Judge) -> None:
                got = j.raised()
                j.require(got is not None and got.error_type == "ValueError",
                          "an int64 tensor: expected ValueError", hint=VALIDATION_HINT)

            return [Case("double", "seven values in float64", [Call("double", (x,))], judge,
                         mistakes=MISTAKES["double"]),
                    Case("double", "an int64 tensor raises ValueError", [Call("double", (torch.arange(3),))],
                         rejects, part="validation")]
    ''',
    "grader/cases/nb09_skeleton.py": '''
        """Hidden cases of notebook 09."""

        from __future__ import annotations

        import torch

        from tfcourse.checks.call import Call
        from tfcourse.checks.case import Case
        from tfcourse.checks.nb09_skeleton import MISTAKES, NOTEBOOK
        from tfcourse.device import make_generator

        from . import HiddenCases, hidden_case

        HIDDEN = HiddenCases(NOTEBOOK)


        @HIDDEN.exercise("double")
        def _double(seed: int) -> list[Case]:
            s = seed * 1000 + 100
            x = torch.randn(3, 4, generator=make_generator(s), dtype=torch.float32)
            ints = torch.arange(4, dtype=torch.int32)
            return [hidden_case("double", "a (3, 4) float32 tensor: matches the reference", [Call("double", (x,))],
                                s, mistakes=MISTAKES["double"]),
                    hidden_case("double", "an int32 tensor raises ValueError", [Call("double", (ints,))], s + 1,
                                part="validation")]


        cases, hidden_cases = HIDDEN.cases, HIDDEN.hidden_cases
    ''',
    "tests/catalogue/nb09_skeleton.py": '''
        """Wrong and correct implementations of notebook 09's exercise."""

        from __future__ import annotations

        from tests.catalogue import entry, variant, without_blocks

        NOTEBOOK = "09_skeleton"

        _DOUBLE = """
        def double(x):
            if not x.is_floating_point():
                raise ValueError("x must be a floating-point tensor")
            return 2 * x
        """

        WRONG = {"double": [
            entry("squared", variant(_DOUBLE, ("2 * x", "x * x")), "don't square"),
            entry("plus one", variant(_DOUBLE, ("2 * x", "x + 1")), None),
            entry("halved", variant(_DOUBLE, ("2 * x", "x / 2")), "don't divide"),
            entry("a list", variant(_DOUBLE, ("2 * x", "[2 * v for v in x]")), None),
            entry("correct math, no validation", without_blocks(_DOUBLE, "if not x.is_floating_point():"),
                  "raise ValueError"),
        ]}
        CORRECT = {"double": [entry("times two", _DOUBLE), entry("sum", variant(_DOUBLE, ("2 * x", "x + x")))]}
    ''',
}


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    setup = nbformat.v4.new_code_cell("import torch\n")
    setup.metadata["tfcourse"] = {"setup": True}
    solution = nbformat.v4.new_code_cell(SOLUTION)
    solution.metadata["nbgrader"] = {"grade": False, "grade_id": "double", "locked": False, "schema_version": 3,
                                     "solution": True, "task": False}
    tests = []
    for grade_id, part, points in (("test_double", "core", 0.75), ("test_double__validation", "validation", 0.25)):
        test = nbformat.v4.new_code_cell(TEST_CELL.format(part=part))
        test.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
                                     "schema_version": 3, "solution": False, "task": False}
        test.metadata["tags"] = ["raises-exception"]
        tests.append(test)
    nb.cells = [nbformat.v4.new_markdown_cell("# 09 — A skeleton"), setup,
                nbformat.v4.new_code_cell("from tfcourse.checks.nb09_skeleton import check_double\n"),
                nbformat.v4.new_markdown_cell("## 1. Doubling"),
                nbformat.v4.new_markdown_cell("### Exercise 1 — `double`  ★☆☆  (~1 min, 1 point)\n\nReturn 2·x; "
                                              "raise `ValueError` for a tensor that is not floating-point."),
                solution, *tests]
    return nb


def _run(clone: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=clone, capture_output=True, text=True, timeout=900)


def test_a_skeleton_notebook_added_by_the_steps_is_built_checked_and_graded(tmp_path):
    clone = _clone(tmp_path / "repo")
    nbformat.write(_notebook(), clone / "solutions" / f"{NAME}.ipynb")
    for rel, text in FILES.items():
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        (clone / rel).write_text(dedent(text).lstrip("\n"), encoding="utf-8")
    pyproject = clone / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        '    "slow:', '    "nb09: notebook 09, a skeleton",\n    "slow:'), encoding="utf-8")

    build = _run(clone, "-m", "grader.build")
    assert build.returncode == 0, build.stderr
    assert (clone / "notebooks" / f"{NAME}.ipynb").is_file() and (clone / "tfcourse" / "reference" / "nb09_skeleton.py").is_file()
    assert "raise NotImplementedError()" in (clone / "notebooks" / f"{NAME}.ipynb").read_text()

    check = _run(clone, "-c", "import torch\nfrom tfcourse.checks.nb09_skeleton import check_double\n"
                              "check_double(lambda x: 2 * x, part='core')\n"
                              "for wrong, part in ((lambda x: x * x, 'core'), (lambda x: 2 * x, 'validation')):\n"
                              "    try:\n        check_double(wrong, part=part)\n"
                              "    except AssertionError as e:\n        print(e)\n")
    assert check.returncode == 0 and check.stdout.startswith("✓ double (core)") and "hint: multiply by 2" in check.stdout \
        and "hint: check x.is_floating_point()" in check.stdout, check.stdout + check.stderr

    tests = _run(clone, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-k",
                 f"{NAME} or every_exercise_of_the_course_is_catalogued",
                 "tests/test_protocol.py", "tests/test_catalogue.py", "tests/test_build.py",
                 "tests/test_proportional_points.py")
    assert tests.returncode == 0 and "passed" in tests.stdout, tests.stdout[-3000:]

    for folder, source in (("wrong", "def double(x):\n    return x * x\n"), ("no_validation", NO_VALIDATION)):
        (clone / folder).mkdir()
        nb = nbformat.read(clone / "solutions" / f"{NAME}.ipynb", as_version=4)
        (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "double"]
        cell.source = source
        nbformat.write(nb, clone / folder / f"{NAME}.ipynb")
    report = tmp_path / "r.json"
    graded = _run(clone, "-m", "grader", "solutions", "notebooks", "wrong", "no_validation", "--notebooks", NAME,
                  "--json", str(report))
    assert graded.returncode == 0, graded.stderr
    rows = {r["submission"]: r["notebooks"][0]["exercises"][0] for r in json.loads(report.read_text())["submissions"]}
    assert (rows["solutions"]["status"], rows["solutions"]["score"]) == ("passed", 1)
    assert rows["notebooks"]["status"] == "not_attempted"
    assert rows["wrong"]["status"] == "failed" and "multiply by 2" in rows["wrong"]["feedback"]
    assert (rows["no_validation"]["status"], rows["no_validation"]["score"]) == ("failed", 0.75), rows["no_validation"]
