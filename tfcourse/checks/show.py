"""How a check's verdict appears in a notebook: one line, as plain text everywhere (a terminal,
pytest, the grader's reports), and in a Jupyter kernel also as HTML, a green box of the same kind
as the pink one JupyterLab draws round a failure.

JupyterLab's own rule for output text (``.jp-OutputArea-output pre { word-break: break-all }``)
breaks a failure line mid-word in a narrow window ("ce/ll"). The HTML carries a style that keeps
the words of a failure box whole (``word-break: normal; overflow-wrap: break-word``: a word longer
than the line still breaks, nothing else does); JupyterLab applies it to the page while the output
is trusted (run in this session). The notebook's checks import cell shows it once, with no visible
content, so the failures above any first pass wrap at spaces too.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["WRAP_STYLE", "in_jupyter_kernel", "show_style", "show_success", "success_html", "checks_passed"]

#: The wrapping of a verdict's text: words stay whole; only a word longer than the line breaks.
WRAP_STYLE = "white-space: pre-wrap; word-break: normal; overflow-wrap: break-word"

_FAILURE_RULE = (".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] pre,"
                 " .jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr'] pre"
                 f" {{ {WRAP_STYLE}; }}")

# the same kind of box as JupyterLab's error output (--jp-rendermime-error-background), in green;
# the theme's success colours where the theme has them, fixed ones otherwise
_BOX_STYLE = ("background: var(--jp-success-color3, #e6f4ea); color: var(--jp-content-font-color0, #1a3d1a);"
              " border-left: 3px solid var(--jp-success-color1, #2e7d32); padding: 2px 6px;"
              " font-family: var(--jp-code-font-family, monospace); font-size: var(--jp-code-font-size, 13px);"
              f" line-height: var(--jp-code-line-height, 1.3077); margin: 0; {WRAP_STYLE}")


def checks_passed(n: int, exercise: str, part: str | None = None) -> str:
    """The success line: "✓ softmax: all 4 checks passed", "✓ mean_pool (core): the check passed"."""
    which = f" ({part})" if part else ""
    return f"✓ {exercise}{which}: all {n} checks passed" if n != 1 else f"✓ {exercise}{which}: the check passed"


def in_jupyter_kernel() -> Any:
    """The IPython shell when this runs in a Jupyter kernel (it has a front end that renders HTML),
    else None (a terminal IPython, plain Python, pytest, the grader's child)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def success_html(line: str) -> str:
    """The green box: its style inline, so it needs no style sheet (the failure boxes' wrapping rule
    is shown once, by ``show_style``, not again with every pass)."""
    return f"<pre class='tfcourse-pass' style=\"{_BOX_STYLE}\">{html.escape(line)}</pre>"


def show_success(line: str) -> None:
    """Print ``line``; in a Jupyter kernel, show it as a green box (plain text kept as the fallback)."""
    if in_jupyter_kernel() is None:
        print(line)
        return
    from IPython.display import display

    display({"text/plain": line, "text/html": success_html(line)}, raw=True)


_STYLE_SHOWN = False


def show_style() -> None:
    """In a Jupyter kernel, once, the style that keeps a failure line's words whole (nothing
    visible): the import of a notebook's checks calls it."""
    global _STYLE_SHOWN
    if _STYLE_SHOWN or in_jupyter_kernel() is None:
        return
    _STYLE_SHOWN = True
    from IPython.display import display

    display({"text/plain": "", "text/html": f"<style>{_FAILURE_RULE}</style>"}, raw=True)
