"""The learner's JupyterLab, in a real browser: Run All runs the whole notebook, figures and widgets
draw, the docs link opens, nothing is modified on open, and nbgrader's instructor side is absent.

JupyterLab is started the README's way (``python -m tfcourse.lab``, learner mode) on 127.0.0.1, a
free port and a token, serving a temporary copy of ``notebooks/`` and ``docs/``; Debian's Chromium
(``/usr/bin/chromium``, driven by Playwright; Playwright's own browser download is not used) opens
each learner notebook untouched and runs Kernel > Restart Kernel and Run All Cells.

On failure a screenshot of the page is written to a folder named in the failure message.
Skipped (with the reason) where Playwright or Chromium is missing; ``.ci/run`` installs both.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHROMIUM = next((p for p in (os.environ.get("TFCOURSE_CHROMIUM"), "/usr/bin/chromium",
                             shutil.which("chromium"), shutil.which("chromium-browser")) if p and Path(p).exists()),
                None)
RUN_ALL_TIMEOUT_S = 600  # per notebook, a backstop: one run takes one to three minutes (08), longer while other tests load the machine
FIGURE_CELL = re.compile(r"\bplt\.|tfcourse\.plots|\binteractive_plot\(")

pytestmark = pytest.mark.slow
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install -r requirements-dev.txt)")
if CHROMIUM is None:
    pytest.skip("Chromium is not installed (apt-get install chromium; or set TFCOURSE_CHROMIUM)",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server: in learner mode, started by ``python -m tfcourse.lab`` (the README's
    learner command), or as instructors start it (``jupyter lab``, every nbgrader extension on)."""

    def __init__(self, tmp: Path, learner: bool = True):
        self.root = tmp / "course"
        self.root.mkdir()
        shutil.copytree(ROOT / "notebooks", self.root / "notebooks")
        shutil.copytree(ROOT / "docs", self.root / "docs")
        settings = tmp / "settings" / "@jupyterlab"
        # every cell in the DOM (no windowing); no news prompt over the notebook: learner mode
        # turns it off itself (tfcourse/lab.py, checked in step 3), plain jupyter lab by setting
        (settings / "notebook-extension").mkdir(parents=True)
        (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
            json.dumps({"windowingMode": "none"}))
        if not learner:
            (settings / "apputils-extension").mkdir(parents=True)
            (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
                json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        self.port, self.token = _free_port(), os.urandom(12).hex()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        for name in ("MPLBACKEND", "TFCOURSE_WIDGETS", "JPY_SESSION_NAME", "JUPYTER_CONFIG_PATH"):
            env.pop(name, None)
        env.update(JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"))
        self.log_path = tmp / "jupyterlab.log"
        start = ([sys.executable, "-m", "tfcourse.lab", "--root", str(self.root)] if learner
                 else [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={self.root}"])
        args = [*start, "--no-browser",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}", f"--LabApp.user_settings_dir={tmp / 'settings'}",
                f"--LabApp.workspaces_dir={tmp / 'workspaces'}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        self.proc = subprocess.Popen(args, cwd=tmp, env=env, stdout=open(self.log_path, "w"),  # noqa: SIM115
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=5)
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("JupyterLab did not start:\n" + self.log_path.read_text()[-3000:]) from None
                time.sleep(0.3)

    def status(self, path: str) -> int:
        try:
            return urllib.request.urlopen(f"{self.url}{path}?token={self.token}", timeout=10).status
        except urllib.error.HTTPError as e:
            return e.code

    def shutdown_kernels(self) -> None:
        """Shut down every kernel, so the next notebook starts alone."""
        for kernel in json.load(urllib.request.urlopen(f"{self.url}/api/kernels?token={self.token}", timeout=10)):
            request = urllib.request.Request(f"{self.url}/api/kernels/{kernel['id']}?token={self.token}",
                                             method="DELETE")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(request, timeout=30)

    def stop(self) -> None:
        """Stop the server and everything it started (its own process group: kernels included)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    server = Lab(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, lab, tmp_path_factory, request):
    """A browser page; on a failure the test's screenshots folder is named in the message."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    name = "screenshots-" + re.sub(r"\W+", "-", request.node.name)[:60]
    if os.environ.get("TFCOURSE_SCREENSHOTS"):  # a folder that outlives pytest's tmp rotation
        pg.shots = Path(os.environ["TFCOURSE_SCREENSHOTS"]) / name
        pg.shots.mkdir(parents=True, exist_ok=True)
    else:
        pg.shots = tmp_path_factory.mktemp(name)
    yield pg
    context.close()
    lab.shutdown_kernels()


@contextlib.contextmanager
def step(page, name: str):
    """Run a step; on failure save a screenshot and say where it is."""
    try:
        yield
    except Exception as e:
        path = page.shots / f"{name}.png"
        with contextlib.suppress(Exception):
            page.screenshot(path=str(path))
        raise AssertionError(f"{name}: {e}\n  screenshot: {path}\n  screenshots folder: {page.shots}") from e


def _kernel_idle(page, timeout_s: float) -> None:
    """Wait until the notebook's kernel is started and idle (the status bar says which kernel)."""
    page.wait_for_function(
        "() => { const s = document.querySelector('.jp-Notebook-ExecutionIndicator');"
        " const bar = (document.querySelector('.jp-StatusBar-Widget') || {}).textContent || '';"
        " return s && s.getAttribute('data-status') === 'idle' && /ipykernel\\) \\| Idle/.test(bar); }",
        timeout=timeout_s * 1000)


CODE_CELLS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell"
FIGURE_TIMEOUT_S = 60


def _code_cells(page):
    return page.locator(CODE_CELLS)


def _prompts(page) -> list[str]:
    return _code_cells(page).evaluate_all(
        "cells => cells.map(c => (c.querySelector('.jp-InputArea-prompt') || {}).textContent || '')")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_learner_notebook_in_jupyterlab(notebook, lab, page):
    source = nbformat.read(notebook, as_version=4)
    code = [c for c in source.cells if c.cell_type == "code"]
    # ?reset: a fresh workspace (only this notebook open), whatever an earlier test left open
    url = f"{lab.url}/lab/tree/notebooks/{notebook.name}?reset&token={lab.token}"

    with step(page, "1-open"):
        page.goto(url)
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-CodeCell", timeout=60_000)
        # the kernel starts and fills in language_info; the notebook must still be unmodified
        _kernel_idle(page, 90)
        page.wait_for_timeout(1500)
        assert _code_cells(page).count() == len(code)

    with step(page, "2-not-modified-on-open"):
        # JupyterLab records the kernel's language_info (with its Python version) on open; the
        # build commits what the course's Python 3.11.7 reports, so only another patch version of
        # Python may mark the notebook modified, and saving it may change nothing else.
        dirty = page.locator(".lm-TabBar-tab.jp-mod-dirty").count()
        recorded = source.metadata.language_info.get("version")
        if recorded == platform.python_version():
            assert dirty == 0, "the notebook is marked modified right after opening it"
        page.keyboard.press("Control+s")
        page.wait_for_function("() => !document.querySelector('.lm-TabBar-tab.jp-mod-dirty')", timeout=30_000)
        committed = notebook.read_text(encoding="utf-8").replace(
            f'"version": "{recorded}"', f'"version": "{platform.python_version()}"')
        # the tab turns clean when the server answers, which can be a moment before the file on
        # disk is complete (a CI run read it without its last newline): read until it settles
        path, deadline = lab.root / "notebooks" / notebook.name, time.monotonic() + 10
        saved = path.read_text(encoding="utf-8")
        while saved != committed and time.monotonic() < deadline:
            page.wait_for_timeout(250)
            saved = path.read_text(encoding="utf-8")
        assert saved == committed, "JupyterLab saves the untouched notebook differently from the committed file"

    with step(page, "3-no-instructor-ui"):
        menus = page.locator(".lm-MenuBar-itemLabel").all_text_contents()
        assert "Kernel" in menus and not any("nbgrader" in m.lower() for m in menus), menus
        titles = " ".join(page.locator(".jp-SideBar .lm-TabBar-tab").evaluate_all(
            "tabs => tabs.map(t => (t.getAttribute('title') || '') + ' ' + t.textContent)"))
        assert "Create Assignment" not in titles and "Formgrader" not in titles, titles
        # nor JupyterLab's Extension Manager (its warning) or news pop-up, which covers figures
        assert "Extension Manager" not in titles, titles
        assert page.get_by_text("official Jupyter news").count() == 0, "the news pop-up is on in learner mode"
        assert lab.status("/formgrader") == 404, "the formgrader server extension is on in learner mode"
        # the learner's side of nbgrader stays: Validate in the notebook toolbar, the assignment list
        assert page.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate").count() >= 1
        assert lab.status("/assignments") != 404, "learner mode must keep the assignment list"

    with step(page, "4-run-all"):
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Kernel$")).click()
        page.get_by_text("Restart Kernel and Run All Cells…").click()
        page.locator(".jp-Dialog .jp-mod-accept").click()
        page.wait_for_function(
            "() => [...document.querySelectorAll("
            "'.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]"
            ".every(p => /\\[\\d+\\]/.test(p.textContent))", timeout=RUN_ALL_TIMEOUT_S * 1000)
        _kernel_idle(page, RUN_ALL_TIMEOUT_S)
        page.wait_for_timeout(1000)

    cells = _code_cells(page)
    with step(page, "5-every-cell-ran"):
        prompts = _prompts(page)
        missing = [code[i].source.splitlines()[0] for i, p in enumerate(prompts) if not re.search(r"\[\d+\]", p)]
        assert not missing, f"code cells without an execution count after Run All: {missing}"
        counts = [int(re.search(r"\[(\d+)\]", p).group(1)) for p in prompts]
        assert counts == sorted(counts) and len(set(counts)) == len(counts), counts

    with step(page, "6-errors-only-in-checks"):
        # an error: a check's one red line ("✗ name: ...") or a traceback's "SomethingError: ...";
        # not a warning on stderr (JupyterLab renders all three with the stderr mime type)
        errors = cells.evaluate_all(
            "cells => cells.map(c => [...c.querySelectorAll("
            "'.jp-OutputArea-output[data-mime-type=\"application/vnd.jupyter.stderr\"]')]"
            ".filter(o => /^\\s*(\u2717 |\\w*(Error|Exception|Interrupt)\\b)/m.test(o.textContent)).length)")
        bad = [code[i].source.splitlines()[0] for i, n in enumerate(errors)
               if n and not code[i].metadata.get("nbgrader", {}).get("grade")]
        assert not bad, f"demo cells with an error after Run All: {bad}"
        assert any(errors), "an untouched notebook's checks should fail visibly"
        # a failure line wraps at spaces, never mid-word (JupyterLab's own rule is break-all)
        breaks = cells.evaluate_all(
            "cells => [...new Set(cells.flatMap(c => [...c.querySelectorAll("
            "'.jp-OutputArea-output[data-mime-type=\"application/vnd.jupyter.stderr\"] pre')]"
            ".map(p => getComputedStyle(p).wordBreak)))]")
        assert breaks == ["normal"], f"failure lines break with word-break {breaks}"
        first_check = next(i for i, c in enumerate(code) if c.metadata.get("nbgrader", {}).get("grade"))
        cells.nth(first_check).screenshot(path=str(page.shots / "first-check-after-run-all.png"))  # kept

    with step(page, "7-figures"):
        # a widget cell's figure comes through the widget manager's comm messages, which can be
        # rendered seconds after the kernel went idle on a loaded machine (a CI run saw 05's first
        # widget cell blank 1 s after idle): wait for every figure cell's image, then name the blank
        figure_cells = [i for i, c in enumerate(code) if FIGURE_CELL.search(c.source)]
        count_images = "cells => cells.map(c => c.querySelectorAll('.jp-OutputArea img').length)"
        with contextlib.suppress(sync_api.TimeoutError):
            page.wait_for_function(
                "([selector, wanted]) => { const cells = [...document.querySelectorAll(selector)];"
                " return wanted.every(i => cells[i] && cells[i].querySelector('.jp-OutputArea img')); }",
                arg=[CODE_CELLS, figure_cells], timeout=FIGURE_TIMEOUT_S * 1000)
        images = cells.evaluate_all(count_images)
        for i in (i for i in figure_cells if images[i] == 0):
            # an off-screen widget cell may draw only once it is in view, as when a learner scrolls
            # to it (a clean-clone CI run saw 05's figures still blank 60 s after Run All)
            cells.nth(i).scroll_into_view_if_needed()
            with contextlib.suppress(sync_api.TimeoutError):
                cells.nth(i).locator(".jp-OutputArea img").first.wait_for(timeout=FIGURE_TIMEOUT_S * 1000)
        images = cells.evaluate_all(count_images)
        blank = [code[i].source.splitlines()[0] for i in figure_cells if images[i] == 0]
        assert not blank, f"figure cells that show no image {FIGURE_TIMEOUT_S} s after Run All, nor scrolled into view: {blank}"

    widget_cells = [i for i, c in enumerate(code) if "interactive_plot(" in c.source]
    for i in widget_cells:
        with step(page, f"8-widget-cell-{i}"):
            cell = cells.nth(i)
            cell.scroll_into_view_if_needed()
            assert cell.locator(".jp-OutputArea img").count() == 1, "a widget cell shows exactly one figure"
            before = cell.locator(".jp-OutputArea img").get_attribute("src")
            if cell.locator(".widget-dropdown select").count():
                select = cell.locator(".widget-dropdown select")
                current = select.input_value()
                options = select.locator("option").evaluate_all("os => os.map(o => o.value)")
                select.select_option(next(o for o in options if o != current))
            else:
                handle = cell.locator(".widget-slider .noUi-handle, .widget-slider input").first
                handle.focus()
                page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                "([el, before]) => { const img = el.querySelector('.jp-OutputArea img');"
                " return img && img.getAttribute('src') !== before; }",
                arg=[cell.element_handle(), before], timeout=30_000)
            assert cell.locator(".jp-OutputArea img").count() == 1, "moving the widget added a figure"
            cell.screenshot(path=str(page.shots / f"widget-cell-{i}-moved.png"))  # kept, for a look

    links = page.locator(".jp-RenderedMarkdown a[href*='conventions.md']")
    if links.count():
        with step(page, "9-docs-link"):
            links.first.scroll_into_view_if_needed()
            links.first.click()
            tab = page.locator(".lm-TabBar-tab", has_text="conventions.md")
            tab.wait_for(timeout=30_000)
            heading = (ROOT / "docs" / "conventions.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
            page.locator(".jp-RenderedMarkdown h1", has_text=heading).wait_for(timeout=30_000)
            assert page.locator(".jp-Dialog", has_text=re.compile("Cannot open|not found", re.I)).count() == 0


def test_instructor_jupyterlab_keeps_nbgrader(browser, tmp_path):
    """Control for the learner-mode assertions: ``jupyter lab`` as instructors start it (same
    environment, no learner config) does show the Nbgrader menu and serve the formgrader."""
    server = Lab(tmp_path, learner=False)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        pg = context.new_page()
        pg.shots = tmp_path
        with step(pg, "instructor-menu"):
            pg.goto(f"{server.url}/lab?reset&token={server.token}")
            pg.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Nbgrader$")).wait_for(timeout=60_000)
            assert server.status("/formgrader") != 404
    finally:
        context.close()
        server.stop()
