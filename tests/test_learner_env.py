"""The learner environment of a graded term (``python -m grader.instructor learner-env``): a wheel
without the grader and without the reference of later notebooks, whose visible checks still work
and whose missing reference modules say why (docs/grading.md, "The learner environment")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

from grader.instructor.__main__ import main
from tests.test_nbgrader_roundtrip import _with_cells

# builds a wheel and a virtual environment: the full suite only
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
NB1, NB2 = "01_attention", "02_multi_head_attention"
TIMEOUT = 900


LEARNER_SCRIPT = r'''
import importlib, json, sys
import nbformat

import tfcourse
assert tfcourse.__file__.startswith(sys.argv[1]), tfcourse.__file__
result = {"grader": None, "nb02": None, "checks": []}
for mod, key in (("grader", "grader"), ("tfcourse.reference.nb02_multi_head_attention", "nb02")):
    try:
        importlib.import_module(mod)
        result[key] = "imported"
    except ModuleNotFoundError as exc:
        result[key] = str(exc)
importlib.import_module("tfcourse.reference.nb01_attention")
nb = nbformat.read(sys.argv[2], as_version=4)
ns = {}
for cell in nb.cells:
    if cell.cell_type != "code":
        continue
    gid = cell.metadata.get("nbgrader", {}).get("grade_id")
    if cell.metadata.get("nbgrader", {}).get("grade"):
        try:
            exec(cell.source, ns)
            result["checks"].append([gid, "passed"])
        except BaseException as exc:
            result["checks"].append([gid, f"{type(exc).__name__}: {exc}"])
    else:
        exec(cell.source, ns)
print("RESULT " + json.dumps(result))
'''


def test_learner_env_through_01(tmp_path) -> None:
    """Installed into a fresh venv that sees this environment's packages (torch, nbformat) but not
    the checkout: no grader, no reference past 01, notebook 01's visible checks all pass."""
    assert main(["learner-env", "--through", "01", "--out", str(tmp_path / "dist")]) == 0
    (wheel,) = (tmp_path / "dist").glob("tfcourse-*+through01-py3-none-any.whl")
    import zipfile

    with zipfile.ZipFile(wheel) as whl:
        metadata = next(whl.read(n).decode() for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires and not [r for r in requires if r.split()[1].startswith("torch")], requires
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # this environment's packages as a plain path entry: its .pth files (the editable install of
    # the checkout) are not processed from there
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    "--target", str(site), str(wheel)], check=True, timeout=300)
    released = nbformat.read(ROOT / "notebooks" / f"{NB1}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "solutions" / f"{NB1}.ipynb", as_version=4)
    nb_path = tmp_path / f"{NB1}.ipynb"
    nbformat.write(_with_cells(released, source, {}), nb_path)
    script = tmp_path / "learner.py"
    script.write_text(LEARNER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["MPLBACKEND"] = "Agg"
    proc = subprocess.run([str(python), str(script), str(site), str(nb_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]

    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result["grader"] == "No module named 'grader'", result
    assert "tfcourse.reference.nb02_multi_head_attention" in result["nb02"], result
    test_cells = [c.metadata.nbgrader["grade_id"] for c in released.cells
                  if c.metadata.get("nbgrader", {}).get("grade")]
    assert result["checks"] == [[gid, "passed"] for gid in test_cells], result["checks"]
    assert len(test_cells) >= 6


def test_learner_env_folder_holds_no_answer_key_past_through(tmp_path) -> None:
    from grader.course import load_course

    assert main(["learner-env", "--through", NB2, "--out", str(tmp_path), "--folder"]) == 0
    modules = sorted(p.name for p in (tmp_path / "tfcourse" / "reference").glob("nb*.py"))
    assert modules == ["nb01_attention.py", "nb02_multi_head_attention.py"]
    assert len(load_course()) > 2  # the course has later notebooks, left out
    init = (tmp_path / "tfcourse" / "reference" / "__init__.py").read_text()
    assert f'NOTEBOOKS = ["{NB1}", "{NB2}"]' in init
    assert not (tmp_path / "grader").exists()
    assert (tmp_path / "tfcourse" / "checks" / "nb07_gqa_mla").is_dir()  # checks of every notebook


REFERENCE_PROBE = r'''
import importlib, json, sys

import tfcourse
assert tfcourse.__file__.startswith(sys.argv[1]), tfcourse.__file__
out = {}
for key, stmt in [("import", "import tfcourse.reference.nb03_positional_encodings"),
                  ("from", "from tfcourse.reference.nb03_positional_encodings import apply_rope"),
                  ("fromlist", "from tfcourse.reference import nb04_normalisation"),
                  ("present", "from tfcourse.reference.nb02_multi_head_attention import MultiHeadAttention"),
                  ("nope", "import tfcourse.reference.nope"),
                  ("typo", "import tfcourse.reference.nb03_positional"),
                  ("hidden02", "import tfcourse.reference.nb02_multi_head_attention")]:
    try:
        exec(stmt, {})
        out[key] = ["ok"]
    except ImportError as exc:  # the new error must still be caught here
        out[key] = [type(exc).__name__, exc.name, str(exc)]
print("RESULT " + json.dumps(out))
'''


def _probe_references(lib: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(lib)
    proc = subprocess.run([sys.executable, "-c", REFERENCE_PROBE, str(lib)], cwd=lib, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]

    return json.loads(lines[0].removeprefix("RESULT "))


def test_learner_env_says_why_a_later_reference_is_missing(tmp_path) -> None:
    """Built --through 02, a demo cell of notebook 03 that imports nb03's reference gets a
    ModuleNotFoundError that says the reference is not released yet and that the learner's own
    code is what is graded, not a bare "No module named" (read as a broken install)."""
    assert main(["learner-env", "--through", NB2, "--out", str(tmp_path), "--folder"]) == 0
    result = _probe_references(tmp_path)
    assert result["present"] == ["ok"] and result["hidden02"] == ["ok"], result
    for key, module, number in (("import", "nb03_positional_encodings", "03"),
                                ("from", "nb03_positional_encodings", "03"),
                                ("fromlist", "nb04_normalisation", "04")):
        kind, name, message = result[key]
        assert (kind, name) == ("ModuleNotFoundError", f"tfcourse.reference.{module}"), result[key]
        assert message.startswith(f"No module named 'tfcourse.reference.{module}': the reference "
                                  f"solutions of notebook {number} "), message
        for words in ("not in this course environment yet", "(it holds those of notebooks 01-02)",
                      "after that notebook's due date", "your own implementation above is what is graded",
                      "skip it", "ask your instructor"):
            assert words in message, (words, message)
        # a later notebook's imports cell needs it: skipping is no way out there
        importers = {"03": "06, 07 or 08", "04": "05, 06, 07 or 08"}[number]
        assert (f"If this is the imports cell of notebook {importers} (it needs notebook {number}'s "
                "components): this course environment is too old for the notebook you are opening. "
                "Do not skip that cell") in message, message
    # not a course notebook's module: the ordinary error
    assert result["nope"] == ["ModuleNotFoundError", "tfcourse.reference.nope",
                              "No module named 'tfcourse.reference.nope'"], result["nope"]
    assert result["typo"][2] == "No module named 'tfcourse.reference.nb03_positional'", result["typo"]


def test_grader_library_copy_keeps_the_ordinary_error(tmp_path) -> None:
    """The grader's copy for notebook 02 deletes nb02 on: importing it still fails, with the
    ordinary error (the feedback adds why, tfcourse/checks/case.py), not the learner
    environment's "not released yet" (the grader hides it whatever the date)."""
    from grader.isolation.jobfolder import copy_library

    copy_library(tmp_path, NB2)
    result = _probe_references(tmp_path)
    assert result["hidden02"] == ["ModuleNotFoundError", "tfcourse.reference.nb02_multi_head_attention",
                                  "No module named 'tfcourse.reference.nb02_multi_head_attention'"], result
    assert result["import"][2] == "No module named 'tfcourse.reference.nb03_positional_encodings'", result


def test_visible_check_without_the_reference_says_why() -> None:
    """In a learner environment without this notebook's reference, a check whose exercise calls a
    failing one cannot stand the course's version in: it fails and says why (with the
    reference installed, the same answer passes: one bug costs points once)."""
    import copy
    import math

    import torch

    from tfcourse.checks import nb01_attention as checks
    from tfcourse.checks import run

    from .test_nbgrader_roundtrip import NAN_SOFTMAX, SDPA_ON_OWN_SOFTMAX

    ns: dict = {"torch": torch, "math": math}
    exec(NAN_SOFTMAX + SDPA_ON_OWN_SOFTMAX, ns)
    sdpa = ns["scaled_dot_product_attention"]
    cases = checks.NOTEBOOK.cases("scaled_dot_product_attention")
    run.run_checks("scaled_dot_product_attention", sdpa, cases, notebook=checks.NOTEBOOK, verbose=False)
    absent = copy.copy(checks.NOTEBOOK)
    absent.reference = "tfcourse.reference.nb99_not_installed"
    with pytest.raises(run.CheckFailed) as failed:
        run.run_checks("scaled_dot_product_attention", sdpa, cases, notebook=absent, verbose=False)
    assert "your `softmax` fails its own check" in str(failed.value), str(failed.value)
    assert "nb99_not_installed is not installed" in str(failed.value)


NOTEBOOK_05 = "05_feed_forward"


def _registry_reachable(folder: Path) -> str | None:
    """None when pip reaches its index (pip's own configuration), else why not."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest",
                           str(folder), "--only-binary=:all:", "--no-cache-dir", "--retries", "0",
                           "--timeout", "20", "tqdm"], capture_output=True, text=True, timeout=120)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["pip failed"])[-1]


def test_offline_install_and_notebook_05_in_its_learner_env(tmp_path, monkeypatch) -> None:
    """The instructor's step (learner-env --for 05 --download) makes a folder that a machine
    without an index installs from (pip --no-index --find-links), ipykernel included; in that
    kernel notebook 05's imports cell works (it needs notebook 04's RMSNorm), its visible checks
    pass on the solutions, and a demo cell importing 05's own reference says "skip it".
    torch is left out of the download here (--torch-index none: hundreds of MB); the kernel sees
    this environment's torch through a path entry added after the offline install."""
    why = _registry_reachable(tmp_path / "probe")
    if why:
        pytest.skip(f"the package registry is unreachable through pip ({why}): the download step needs it")
    dist = tmp_path / "dist"
    assert main(["learner-env", "--for", NOTEBOOK_05, "--out", str(dist), "--download",
                 "--torch-index", "none"]) == 0
    (wheel,) = dist.glob("tfcourse-*+through04-py3-none-any.whl")
    assert list(dist.glob("ipykernel-*.whl")) and list(dist.glob("numpy-*.whl"))
    assert not list(dist.glob("torch-*.whl"))
    venv = tmp_path / "learner"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no index, no find-links but the folder
    install = subprocess.run([python, "-m", "pip", "install", "--no-index", "--find-links", str(dist),
                              "--quiet", f"tfcourse=={wheel.name.split('-')[1]}"],
                             capture_output=True, text=True, timeout=900, env=env)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    kernel = subprocess.run([python, "-m", "ipykernel", "install", "--sys-prefix", "--name", "tfcourse-learner"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert kernel.returncode == 0, kernel.stderr[-3000:]
    spec = venv / "share" / "jupyter" / "kernels" / "tfcourse-learner" / "kernel.json"
    assert json.loads(spec.read_text())["argv"][0] == python
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz-torch-from-the-hub.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    released = nbformat.read(ROOT / "notebooks" / f"{NOTEBOOK_05}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "solutions" / f"{NOTEBOOK_05}.ipynb", as_version=4)
    nb = _with_cells(released, source, {})
    nb.cells.insert(1, nbformat.v4.new_code_cell(
        "import json, tfcourse\nprint('TFCOURSE', json.dumps(tfcourse.__file__))"))
    nb.cells.append(nbformat.v4.new_code_cell(
        "from tfcourse.reference.nb05_feed_forward import FeedForward as RefFeedForward"))
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_PATH", str(venv / "share" / "jupyter"))  # where the kernel is found
    env.update(JUPYTER_PATH=str(venv / "share" / "jupyter"), MPLBACKEND="Agg")
    client = NotebookClient(nb, kernel_name="tfcourse-learner", timeout=600, allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)  # the kernel's environment: nothing of the checkout
    errors = {i: o for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"}
    printed = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert f'TFCOURSE "{site}' in printed, printed  # the installed wheel, not the checkout
    last = len(nb.cells) - 1
    assert list(errors) == [last], {i: (e.ename, e.evalue[:300]) for i, e in errors.items()}
    assert errors[last].ename == "ModuleNotFoundError" and "skip it" in errors[last].evalue
    checks = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(checks) >= 6 and all(c.outputs for c in checks)
