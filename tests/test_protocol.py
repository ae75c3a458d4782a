"""Each notebook's protocol is declared once, and the repository's structure stays easy to see.

* A notebook's checks (``tfcourse.checks.nbNN_topic``) register their exercises, test cells
  (parts) and call graph on one ``NotebookChecks``; the grader's hidden cases register on a
  ``HiddenCases`` made from it. Both must agree with the test cells of ``solutions/NN_topic.ipynb``.
* Every notebook's checks are a package of the same shape, and none imports another's.
* No import cycle among the project's modules; no hand-written module over about 600 lines.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from grader.build import ROOT, SOLUTIONS
from grader.course import load_course
from grader.names import module_name
from tfcourse.notebook import grade_parts, read_notebook

NOTEBOOKS = sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
SHAPE = ("__init__.py", "cases.py", "mistakes.py")  # every notebook's checks package has these
MAX_LINES = 600
# generated code (tfcourse/reference/) is left out; these are data more than code: tables of
# learner cells (the catalogues of wrong and correct answers, the hostile submissions)
DATA = ("tests/catalogue/", "tests/adversarial/")
EXAMPLES = {"docs/v1.2.md"}  # a made-up link in tests/test_text_numbers.py's sample text


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_protocol_matches_the_notebooks_test_cells(notebook):
    checks = importlib.import_module(f"tfcourse.checks.{module_name(notebook)}")
    hidden = importlib.import_module(f"grader.cases.{module_name(notebook)}")
    parts = grade_parts(read_notebook(SOLUTIONS / f"{notebook}.ipynb"))
    book = checks.NOTEBOOK
    assert book.name == notebook
    assert book.exercises == tuple(parts), "exercises registered in another order than the notebook's"
    for exercise, points in parts.items():
        assert book.parts(exercise) == tuple(points), exercise
        assert callable(getattr(checks, f"check_{exercise}")) and f"check_{exercise}" in checks.__all__
    assert hidden.HIDDEN.checks is book and set(hidden.HIDDEN.exercises) == set(book.exercises)
    exercises = set(book.exercises)
    assert set(book.calls) <= exercises and all(set(c) <= exercises for c in book.calls.values())
    assert {e.name for e in load_course()[notebook].exercises} == exercises


def test_a_check_refuses_a_part_its_exercise_does_not_have():
    from tfcourse.checks import nb01_attention as checks

    with pytest.raises(ValueError, match="no test cell for part 'mask'"):
        checks.check_scaled_dot_product_attention(lambda q, k, v, mask=None: None, part="mask")
    with pytest.raises(KeyError, match="no exercise 'softmaxx'"):
        checks.NOTEBOOK.cases("softmaxx")


def test_registering_twice_or_out_of_shape_is_refused():
    from grader.cases import HiddenCases
    from tfcourse.checks.protocol import NotebookChecks

    book = NotebookChecks("99_skeleton")
    book.exercise("f")(list)
    with pytest.raises(ValueError, match="registered twice"):
        book.exercise("f")(list)
    with pytest.raises(ValueError, match="must start with 'core'"):
        book.exercise("g", parts=("edges",))
    hidden = HiddenCases(book)
    with pytest.raises(ValueError, match="no exercise 'h'"):
        hidden.exercise("h")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebooks_checks_are_a_package_of_the_same_shape(notebook):
    folder = ROOT / "tfcourse" / "checks" / module_name(notebook)
    assert folder.is_dir(), f"{folder} is not a package"
    assert all((folder / name).is_file() for name in SHAPE), sorted(p.name for p in folder.iterdir())
    for path in folder.glob("*.py"):
        for imported in _imports(path):
            other = imported.split(".")[2] if imported.startswith("tfcourse.checks.nb") else ""
            assert not other or other == module_name(notebook), f"{path.name} imports {imported}"


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The project modules ``path`` imports (at any depth, but not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
            for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] in ("grader", "tfcourse")}


def _project_modules() -> dict[str, Path]:
    paths = [p for folder in ("grader", "tfcourse") for p in (ROOT / folder).rglob("*.py")]
    return {_module(p): p for p in paths if "__pycache__" not in p.parts}


def test_no_import_cycle():
    """A module imported by another never imports it back, directly or through others (a
    package's __init__ that imports its own submodules is not a cycle)."""
    modules = _project_modules()
    graph = {}
    for name, path in modules.items():
        deps = {m for m in _imports(path) if m in modules and m != name}
        graph[name] = {d for d in deps if not name.startswith(d + ".")}  # a submodule importing its package
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_no_hand_written_module_is_over_600_lines():
    tracked = [p for folder in ("grader", "tfcourse", "tests") for p in (ROOT / folder).rglob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in tracked
            if "__pycache__" not in p.parts and "reference" not in p.relative_to(ROOT).parts[:2]
            and not str(p.relative_to(ROOT)).startswith(DATA)
            and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def test_every_document_a_file_cites_exists():
    """A Markdown file named in the code, the docs or the notebooks is in the repository (found
    from the repository root, docs/ or the citing file's folder); the team's design notes, kept
    outside the repository, are never cited: users of the repository do not have them."""
    import re
    import subprocess

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py", "*.md", "*.ipynb", "*.toml"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    notes = "/".join(("shared", "design"))
    missing = []
    for rel in files:
        path = ROOT / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        assert notes not in text, f"{rel} cites the team's notes ({notes})"
        for cited in set(re.findall(r"[\w./-]*[\w-]\.md\b", text)) - EXAMPLES:
            name = cited.lstrip("./")
            if not any((base / name).is_file() for base in (ROOT, ROOT / "docs", path.parent)):
                missing.append(f"{rel}: {cited}")
    assert not missing, f"cited documents that do not exist: {missing}"
