"""The learner's side of JupyterLab without a browser: interactive_plot's choice between live and
static, and the learner mode's config (names that exist in nbgrader 0.9.6)."""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import files
from pathlib import Path

import pytest

from tfcourse import lab, widgets


@pytest.fixture
def calls():
    seen = []

    def draw(d_k: int = 256, head: int = 2) -> None:
        seen.append({"d_k": d_k, "head": head})

    return draw, seen


class FakeWidget:
    def __init__(self, value):
        self.value = value


@pytest.mark.parametrize("env, live", [
    ({}, False),
    ({"JPY_SESSION_NAME": "/x/notebooks/01_attention.ipynb"}, True),
    ({"JPY_SESSION_NAME": "/x/01.ipynb", "TFCOURSE_WIDGETS": "static"}, False),
    ({"TFCOURSE_WIDGETS": "live"}, True),
])
def test_widget_frontend(monkeypatch, env, live):
    for name in ("JPY_SESSION_NAME", "TFCOURSE_WIDGETS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert widgets.widget_frontend() is live


def test_headless_draws_once_with_the_controls_values(monkeypatch, calls):
    monkeypatch.setattr(widgets, "widget_frontend", lambda: False)
    draw, seen = calls
    assert widgets.interactive_plot(draw, d_k=FakeWidget(64), head=[0, 1, 2, 3]) is None
    assert seen == [{"d_k": 64, "head": 2}]  # a widget's value; the function's default otherwise


def test_live_shows_the_controls_with_their_labels_in_full(monkeypatch, calls):
    ipywidgets = pytest.importorskip("ipywidgets")
    monkeypatch.setattr(widgets, "widget_frontend", lambda: True)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    draw, seen = calls
    slider = ipywidgets.IntSlider(value=16, min=1, max=64, description="d_k")
    widgets.interactive_plot(draw, d_k=slider, head=[0, 1, 2, 3])
    (panel,) = shown
    assert isinstance(panel, ipywidgets.interactive) and seen == [{"d_k": 16, "head": 2}]  # drawn once, live
    controls = [c for c in panel.children if isinstance(c, ipywidgets.ValueWidget)]
    assert slider in controls and {c.description for c in controls} == {"d_k", "head"}
    # the default width (about 80 px) cuts "temperature" to "temperat…": every label is sized to fit
    assert all(c.style.description_width == "initial" for c in controls)


def test_bad_controls_are_named(monkeypatch, calls):
    monkeypatch.setattr(widgets, "widget_frontend", lambda: False)
    draw, _ = calls
    with pytest.raises(ValueError, match="no argument 'dk'"):
        widgets.interactive_plot(draw, dk=[1, 2])
    with pytest.raises(ValueError, match="default for 'x'"):
        widgets.interactive_plot(lambda x: None, x=[1, 2])
    with pytest.raises(TypeError, match="must be a function"):
        widgets.interactive_plot("draw")


def test_learner_config_disables_only_instructor_parts():
    page = json.loads((lab.LEARNER_CONFIG / "labconfig" / "page_config.json").read_text())
    assert set(page["disabledExtensions"]) == set(lab.INSTRUCTOR_PLUGINS) | set(lab.QUIET_PLUGINS)
    server = json.loads((lab.LEARNER_CONFIG / "jupyter_server_config.json").read_text())
    assert server["ServerApp"]["jpserver_extensions"] == dict.fromkeys(lab.INSTRUCTOR_SERVER_EXTENSIONS, False)


def test_learner_config_names_exist_in_nbgrader():
    """A renamed plugin or extension would silently stay on: check the names against nbgrader."""
    import importlib

    for module in lab.INSTRUCTOR_SERVER_EXTENSIONS:
        assert hasattr(importlib.import_module(module), "_load_jupyter_server_extension"), module
    bundle = "".join(f.read_text() for f in files("nbgrader")
                     if "labextension/static" in str(f) and str(f).endswith(".js"))
    assert bundle, "nbgrader's labextension is not installed"
    for plugin in lab.INSTRUCTOR_PLUGINS + ("@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:validate-assignment"):
        assert f'"{plugin}"' in bundle, f"nbgrader has no lab plugin {plugin}"


def test_quiet_plugins_exist_in_this_jupyterlab():
    """The news pop-up and the Extension Manager are plugins of JupyterLab itself: a renamed one
    would quietly come back, so check the ids against the installed JupyterLab's bundle."""
    from jupyterlab.commands import get_app_dir

    static = Path(get_app_dir()) / "static"
    bundle = "".join(p.read_text(encoding="utf-8", errors="replace") for p in static.glob("*.js"))
    assert bundle, f"no JupyterLab bundle in {static}"
    for plugin in lab.QUIET_PLUGINS:
        assert plugin in bundle, f"JupyterLab has no plugin {plugin}"


def test_command_serves_the_repository_root_in_learner_mode(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_attention.ipynb").write_text("{}")
    cmd = lab.command(tmp_path, ["--no-browser"])
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"] and cmd[-1] == "--no-browser"
    assert f"--ServerApp.root_dir={tmp_path}" in cmd
    assert "--LabApp.default_url=/lab/tree/notebooks/01_attention.ipynb" in cmd
    env = lab.learner_env({"JUPYTER_CONFIG_PATH": "/elsewhere"})
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0] == str(lab.LEARNER_CONFIG)
    assert env["JUPYTER_CONFIG_PATH"].endswith("/elsewhere")
