"""One figure per widget cell: live controls in JupyterLab, one static figure when headless.

``interactive_plot(draw, name=control, ...)`` is what a notebook's widget cell calls:

* in a notebook opened in a Jupyter server's frontend (JupyterLab, Notebook 7), it shows
  ``ipywidgets.interact(draw, ...)``: the controls and, under them, the one figure they redraw;
* everywhere else (nbclient, ``jupyter nbconvert --execute``, nbgrader's autograde, the course's
  tests, a plain ``python`` run) it calls ``draw`` once with the controls' current values and
  shows that figure, with no widget.

How it tells the two apart: jupyter_server starts a notebook's kernel with the environment
variable ``JPY_SESSION_NAME`` (the notebook's path) set (``SessionManager.get_kernel_env``);
nbclient, nbconvert and nbgrader start kernels without it. So a kernel with ``JPY_SESSION_NAME``
has a frontend that can render widgets. The variable is inherited by processes the kernel
starts, so a headless run started *from inside* a notebook (``!jupyter nbconvert --execute``)
counts as live; set ``TFCOURSE_WIDGETS=static`` (or ``live``) to override the guess either way.
Without ipywidgets installed the static figure is drawn and a one-line note says how to get the
controls.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

__all__ = ["interactive_plot", "widget_frontend"]


def widget_frontend() -> bool:
    """True when the kernel was started by a Jupyter server for a notebook (widgets render).

    ``TFCOURSE_WIDGETS=live`` / ``static`` overrides; otherwise ``JPY_SESSION_NAME`` is the signal
    (module docstring).
    """
    forced = os.environ.get("TFCOURSE_WIDGETS", "").strip().lower()
    if forced in ("live", "static"):
        return forced == "live"
    return bool(os.environ.get("JPY_SESSION_NAME"))


def _static_values(draw: Callable[..., Any], controls: dict[str, Any]) -> dict[str, Any]:
    """The value each control shows first: a widget's ``.value``, else ``draw``'s default."""
    defaults = {name: p.default for name, p in inspect.signature(draw).parameters.items()
                if p.default is not inspect.Parameter.empty}
    values = {}
    for name, control in controls.items():
        if hasattr(control, "value"):
            values[name] = control.value
        elif name in defaults:
            values[name] = defaults[name]
        else:
            raise ValueError(f"interactive_plot: give {draw.__name__}() a default for {name!r} "
                             "or pass a widget with a value")
    return values


def interactive_plot(draw: Callable[..., Any], **controls: Any) -> None:
    """Show ``draw`` under live controls in JupyterLab, or draw it once when headless.

    draw: a function that draws one figure (and calls ``plt.show()``) from keyword arguments.
    controls: one per argument of ``draw`` to vary: an ipywidgets widget (its ``value`` is the
    first picture) or an ``ipywidgets.interact`` abbreviation (a list of options, a ``(min, max,
    step)`` tuple; the first picture then uses ``draw``'s default for that argument).
    Returns None (so a cell ending with the call prints nothing more). Raises ValueError when a
    control names no argument of ``draw`` or has no first value; TypeError when ``draw`` is not
    callable.
    """
    if not callable(draw):
        raise TypeError(f"interactive_plot: draw must be a function, got {type(draw).__name__}")
    params = inspect.signature(draw).parameters
    unknown = [name for name in controls if name not in params]
    if unknown:
        raise ValueError(f"interactive_plot: {draw.__name__}() has no argument {unknown[0]!r}")
    if widget_frontend():
        try:
            import ipywidgets
        except ImportError:
            print("ipywidgets is not installed (pip install ipywidgets): a static figure instead.")
        else:
            panel = ipywidgets.interactive(draw, **controls)  # what interact shows, before it is shown
            for control in panel.children:  # labels in full ("temperature", not "temperat…")
                if hasattr(getattr(control, "style", None), "description_width"):
                    control.style.description_width = "initial"
            from IPython.display import display

            display(panel)
            return
    draw(**_static_values(draw, controls))
