"""The report writers: no content makes them fail, files are replaced whole, and a batch that is
interrupted still writes every row it finished."""

from __future__ import annotations

import csv
import json

import pytest

from grader import report as rep
from grader.batch import error_row
from tfcourse.checks.wire import outcome_from_json, safe_text

ODD = "lone \ud800 low \udfff nul \x00 esc \x1b[2J bell \x07 cr \r del \x7f c1 \x9b end"


def test_safe_text_replaces_what_no_writer_or_terminal_should_get():
    assert safe_text("plain ✓ é 😀\ttab\nnewline") == "plain ✓ é 😀\ttab\nnewline"
    cleaned = safe_text(ODD)
    cleaned.encode("utf-8")  # no lone surrogate left
    assert cleaned == ("lone \ufffd low \ufffd nul \ufffd esc \ufffd[2J bell \ufffd cr \ufffd del \ufffd "
                       "c1 \ufffd end")
    assert safe_text("\ud83d\ude00") == "😀"  # a valid surrogate pair is the character it encodes


def test_strings_from_a_child_are_made_safe_where_they_enter():
    o = outcome_from_json({"kind": "error", "error_type": "ValueError\ud800", "error_message": ODD,
                           "error_cell": "<cell \x1b>", "type_name": ""}, {})
    for text in (o.error_type, o.error_message, o.error_cell):
        text.encode("utf-8")
        assert "\x1b" not in text and "\x00" not in text


def _report() -> dict:
    row = error_row(f"learner-{ODD}", ["01_attention"], f"it raised {ODD}")
    row["notebooks"][0]["output"] = ODD
    row[f"key {ODD}"] = ODD
    return {"submissions": [row, error_row("honest", ["01_attention"], "fine")], "seed": 0}


def test_writers_never_fail_on_content(tmp_path):
    report = _report()
    rep.write_json(report, tmp_path / "r.json")
    rep.write_csv(report, tmp_path / "r.csv")
    written = rep.write_feedback(report, tmp_path / "fb")
    back = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert [s["submission"] for s in back["submissions"]] == [safe_text(f"learner-{ODD}"), "honest"]
    rows = list(csv.reader((tmp_path / "r.csv").open(encoding="utf-8")))
    assert len(rows) == 3 and rows[2][0] == "honest"
    assert len(written) == 2 and all("\ufffd" in p.read_text(encoding="utf-8") for p in written[:1])
    assert "\x1b" not in rep.table(report) and "\x1b" not in rep.feedback_text(report["submissions"][0])


def test_a_report_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("old\n", encoding="utf-8")

    def broken(src, dst):
        raise OSError("the disk went away before the move")

    monkeypatch.setattr(rep.os, "replace", broken)
    with pytest.raises(OSError):
        rep.write_json(_report(), path)
    monkeypatch.undo()
    assert path.read_text(encoding="utf-8") == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    rep.write_json(_report(), path)
    assert json.loads(path.read_text(encoding="utf-8"))["seed"] == 0


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_batch_writes_the_rows_it_finished(tmp_path, monkeypatch, stop):
    """Ctrl-C (or the batch failing) after one submission: the reports hold that row, say which
    submissions were not graded, and the exit status says the batch did not finish."""
    import grader.__main__ as cli
    import grader.batch as batch

    def one_then_stop(submissions, *, on_row, notebooks, **kwargs):
        on_row(1, error_row(submissions[1], notebooks, f"done {ODD}"))
        raise stop("stop here")

    monkeypatch.setattr(batch, "grade_batch", one_then_stop)
    subs = [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")]
    out = tmp_path / "out"
    out.mkdir()
    status = cli.main([*subs, "--notebooks", "01_attention", "--sandbox", "none", "--quiet",
                       "--json", str(out / "r.json"), "--csv", str(out / "r.csv"), "--feedback", str(out / "fb")])
    assert status == (130 if stop is KeyboardInterrupt else 1)
    report = json.loads((out / "r.json").read_text(encoding="utf-8"))
    assert [s["submission"] for s in report["submissions"]] == [subs[1]]
    assert report["not_graded"] == [subs[0], subs[2]] and report["interrupted"]
    assert len(list(csv.reader((out / "r.csv").open(encoding="utf-8")))) == 2
    assert [p.name for p in (out / "fb").iterdir()] == ["b.txt"]
