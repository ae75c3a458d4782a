"""The instructor term's pieces that need no grading run (issue 29): each test cell's status word,
the hidden-reference hint, the exchange line init writes, what learner-env keeps for the notebook
being opened, its requirements and its offline download step. The term itself, end to end, is
tests/test_instructor.py and tests/test_learner_env.py (slow)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from grader.instructor import InstructorError
from grader.instructor.course import load_config, prepare_exchange, write_config
from grader.instructor.grade import _output, hidden_reference_note, part_status
from grader.instructor.learner_env import (
    download,
    learner_requirements,
    opens,
    reference_for,
    torch_requirement,
)

NB1 = "01_attention"
COURSE = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation",
          "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]


def _part(score: float, most: float = 2, passed: bool | None = None) -> dict:
    return {"test_cell": "t", "passed": score >= most if passed is None else passed, "score": score,
            "max_score": most, "feedback": ""}


@pytest.mark.parametrize("status, part, word", [
    ("failed", _part(2), "passed"),  # the core cell of an exercise whose masks cell failed
    ("failed", _part(0), "failed"),
    ("passed", _part(2), "passed"),
    ("error", _part(0), "error"),
    ("timeout", _part(0), "timeout"),
    ("not_attempted", _part(0), "not attempted"),
    ("failed", _part(1, passed=True), "failed"),  # partial credit is not a pass
])
def test_part_status_is_the_test_cells_own(status, part, word) -> None:
    assert part_status(part, {"status": status, "parts": [part, _part(0)]}) == word


def test_output_header_of_a_passed_cell_in_a_failed_exercise() -> None:
    core, masks = _part(2), _part(0)
    core["feedback"], masks["feedback"] = "✓ core: all passed", "✗ masks: wrong"
    exercise = {"status": "failed", "parts": [core, masks], "feedback": "✗ sdpa"}
    assert _output(core, exercise, NB1).text.startswith(
        "tfcourse grader: 2 of 2 points for this test cell (passed)\n✓ core")
    assert _output(masks, exercise, NB1).traceback[0] == \
        "tfcourse grader: 0 of 2 points for this test cell (failed)"


def test_hidden_reference_gets_its_hint_once() -> None:
    bare = "✗ softmax: the cell raised ModuleNotFoundError: No module named 'tfcourse.reference.nb01_attention'"
    noted = hidden_reference_note(bare, NB1)
    assert noted.startswith(bare + "\n  hint: tfcourse.reference.nb01_attention holds the course's own "
                                   "solutions of this notebook, which the grader hides"), noted
    assert "your own code from this notebook" in noted
    # another notebook's module, or a message that already explains it: left as it is
    assert hidden_reference_note(bare, "02_multi_head_attention") == bare
    assert hidden_reference_note(bare, "") == bare  # no notebook named: nothing to say
    explained = bare + "\n  hint: the grader hides the course's solutions of the notebook being graded"
    assert hidden_reference_note(explained, NB1) == explained
    exercise = {"status": "error", "parts": [_part(0)], "feedback": bare}
    assert "which the grader hides" in "\n".join(_output(exercise["parts"][0], exercise, NB1).traceback)


def test_init_config_names_the_exchange(tmp_path) -> None:
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    write_config(course, None, str(exchange))
    cfg = load_config(course)
    assert cfg.Exchange.root == str(exchange) and cfg.CourseDirectory.course_id == "tfcourse"
    (line,) = prepare_exchange(course, create=True)
    assert exchange.is_dir() and exchange.stat().st_mode & 0o777 == 0o777, line
    assert f"c.Exchange.root = '{exchange}'" in line and "c.CourseDirectory.course_id = 'tfcourse'" in line
    # an existing config is kept; naming another exchange for it is an error naming the file
    assert write_config(course, None, str(exchange)).startswith("kept ")
    with pytest.raises(InstructorError, match="sets another exchange"):
        write_config(course, None, str(tmp_path / "other"))


def test_init_default_exchange_missing_is_a_warning_with_the_fix(tmp_path) -> None:
    """Without --exchange init writes nbgrader's default and never creates that system folder."""
    from nbgrader.exchange.default import Exchange

    import grader.instructor.course as course_mod

    assert course_mod.DEFAULT_EXCHANGE == Exchange.class_traits()["root"].default_value  # nbgrader's own
    course = tmp_path / "course"
    course.mkdir()
    write_config(course, "c1")
    assert load_config(course).Exchange.root == course_mod.DEFAULT_EXCHANGE
    missing = tmp_path / "srv" / "exchange"
    (course / "nbgrader_config.py").write_text(
        (course / "nbgrader_config.py").read_text().replace(course_mod.DEFAULT_EXCHANGE, str(missing)))
    (line,) = prepare_exchange(course, create=False)
    assert line.startswith(f"warning: the exchange {missing} does not exist"), line
    assert f"sudo mkdir -p {missing} && sudo chmod 777 {missing}" in line and "draft" in line
    assert not missing.exists()
    # a config of an older init, without the line
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    (line,) = prepare_exchange(course, create=False)
    assert "sets no exchange" in line and "c.Exchange.root" in line


def test_learner_env_for_a_notebook_holds_what_its_imports_cell_needs() -> None:
    assert reference_for("05", COURSE) == COURSE[:4]
    assert reference_for("05_feed_forward", COURSE) == COURSE[:4]
    with pytest.raises(InstructorError, match="first notebook"):
        reference_for("01", COURSE)
    with pytest.raises(InstructorError, match="not a course notebook"):
        reference_for("99", COURSE)
    # notebook 05's imports cell needs 04's RMSNorm: a package through 03 opens 01-04 only
    assert opens(COURSE[:3], COURSE) == COURSE[:4]
    assert "05_feed_forward" in opens(COURSE[:4], COURSE)


def test_learner_requirements_have_the_kernel_not_torch() -> None:
    names = [r.split(">")[0].split("=")[0].split("[")[0].strip().lower()
             for r in learner_requirements({"dependencies": ["torch>=2.1", "numpy", "tqdm"]})]
    assert names == ["numpy", "tqdm", "ipykernel"]
    assert torch_requirement().startswith("torch==")


def test_download_runs_pip_into_the_folder_and_fails_in_one_line(tmp_path) -> None:
    wheel = tmp_path / "tfcourse-0.1.0+through04-py3-none-any.whl"
    calls: list[list[str]] = []

    def ok(cmd):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    ran = download(wheel, tmp_path, torch_index="https://mirror.example/torch-cpu", run=ok)
    assert [c[1:5] for c in calls] == [["-m", "pip", "download", "--dest"]] * 2
    assert calls[0][-1] == str(wheel) and "--only-binary=:all:" in calls[0]
    assert calls[1][-3:] == [torch_requirement(), "--index-url", "https://mirror.example/torch-cpu"]
    assert len(ran) == 2 and ran[0].startswith("pip download --dest")
    calls.clear()
    download(wheel, tmp_path, torch_index=None, run=ok)
    assert len(calls) == 1  # torch left out

    def fails(cmd):
        return subprocess.CompletedProcess(cmd, 1, "", "Looking in indexes\nERROR: No matching distribution "
                                                      "found for ipykernel>=6\n")

    with pytest.raises(InstructorError) as err:
        download(wheel, tmp_path, torch_index=None, run=fails)
    assert "No matching distribution found for ipykernel>=6" in str(err.value)
    assert "\n" not in str(err.value) and "PIP_INDEX_URL" in str(err.value)


def test_learner_env_needs_for_or_through(tmp_path, capsys) -> None:
    from grader.instructor.__main__ import main

    with pytest.raises(SystemExit):
        main(["learner-env", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["learner-env", "--for", "05", "--through", "04", "--out", str(tmp_path)])
    assert main(["learner-env", "--for", "05", "--out", str(tmp_path), "--folder"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in Path(tmp_path, "tfcourse", "reference").glob("nb*.py")) == \
        [f"nb{n}.py" for n in COURSE[:4]]
    assert "opens notebooks 01, 02, 03, 04, 05" in out, out
