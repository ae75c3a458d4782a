"""Start JupyterLab for a learner: at the repository root, on notebook 01, without nbgrader's
instructor side.

    python -m tfcourse.lab                 # learner mode (what the README tells learners to run)
    python -m tfcourse.lab --root DIR ...  # another checkout or copy; other options go to jupyter lab

* The server's root is the repository root (not ``notebooks/``), so the notebooks' links to
  ``../docs/conventions.md`` open; JupyterLab starts on ``notebooks/01_attention.ipynb``.
* Learner mode: ``tfcourse/jupyter_learner/`` goes first on ``JUPYTER_CONFIG_PATH`` for this
  server only. Its ``labconfig/page_config.json`` disables nbgrader's instructor labextension
  plugins (``@jupyter/nbgrader:menu``, ``:create-assignment``, ``:formgrader``, ``:course-list``)
  and its ``jupyter_server_config.json`` turns off the matching server extensions
  (``nbgrader.server_extensions.formgrader`` and ``.course_list``), and JupyterLab's news pop-up
  and Extension Manager (``QUIET_PLUGINS``). Validate stays, and so does the assignment list's
  server extension; its page opens only from the Nbgrader menu in nbgrader 0.9.6, which is off,
  so learners of an nbgrader course fetch and submit on the command line
  (``nbgrader fetch_assignment NN_topic``, ``nbgrader submit NN_topic``) or in plain
  ``jupyter lab``. Nothing in the user's or the environment's Jupyter config is changed:
  instructors start ``jupyter lab`` as usual and keep everything nbgrader installs.
  (A ``jpserver_extensions`` setting in the user's own ``~/.jupyter/jupyter_server_config.json``
  takes precedence over this one; ``nbgrader`` never writes one there unless asked with
  ``jupyter server extension enable --user``.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEARNER_CONFIG = Path(__file__).resolve().parent / "jupyter_learner"
FIRST_NOTEBOOK = "notebooks/01_attention.ipynb"

#: nbgrader 0.9.6's instructor plugins and server extensions that learner mode turns off.
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:menu", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list")
INSTRUCTOR_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader",
                                "nbgrader.server_extensions.course_list")
#: JupyterLab 4's plugins that learner mode also turns off: the news pop-up ("Would you like to
#: receive official Jupyter news?", which covers figures) and the Extension Manager (its warning
#: about third-party extensions; a learner installs nothing into the course's environment).
QUIET_PLUGINS = ("@jupyterlab/apputils-extension:announcements", "@jupyterlab/extensionmanager-extension:plugin")


def learner_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: os.environ) with the learner config first on JUPYTER_CONFIG_PATH."""
    env = dict(os.environ if environ is None else environ)
    paths = [str(LEARNER_CONFIG)] + [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths)
    return env


def command(root: Path, extra: list[str]) -> list[str]:
    """The ``jupyter lab`` command line for a server rooted at ``root``."""
    args = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    if (root / FIRST_NOTEBOOK).exists():
        args.append(f"--LabApp.default_url=/lab/tree/{FIRST_NOTEBOOK}")
    return args + extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfcourse.lab", description=__doc__.split("\n\n")[0],
                                     epilog="Other options are passed to jupyter lab.")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="folder to serve (default: this checkout's root)")
    args, extra = parser.parse_known_args(argv)
    root = args.root.resolve()
    if not root.is_dir():
        parser.error(f"--root {root} is not a folder")
    args, env = command(root, extra), learner_env()
    if os.name == "posix":  # become the server: a signal to this process reaches JupyterLab itself
        os.execve(args[0], args, env)
    try:
        return subprocess.call(args, env=env)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
