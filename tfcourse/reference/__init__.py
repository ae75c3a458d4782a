"""Reference components exported from the solution notebooks by `python -m grader.build`.

Later notebooks import earlier notebooks' components from here, so a learner who is stuck
on one notebook can still do the next. GENERATED: do not edit.

NOTEBOOKS names the notebooks whose module this install holds (a learner environment built by
`python -m grader.instructor learner-env --through NN` only those up to NN), COURSE all of them.
Importing a course notebook's module left out here raises ModuleNotFoundError saying why.
"""

import importlib.abc as _abc
import sys as _sys

NOTEBOOKS = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation", "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]
COURSE = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation", "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]

_UNRELEASED = {f"{__name__}.nb{n}": n for n in COURSE if n not in NOTEBOOKS}


def _not_released(name: str) -> ModuleNotFoundError:
    notebook = _UNRELEASED[name]
    number = notebook.split("_", 1)[0]
    return ModuleNotFoundError(
        f"No module named {name!r}: the reference solutions of notebook {number} ({notebook}) "
        "are not in this course environment yet. Your instructor releases them after that "
        "notebook's due date.\n"
        "If this cell only compares your code with the reference, or demonstrates it, skip it: "
        "your own implementation above is what is graded, not this cell.\n"
        f"To run it later: once notebook {number}'s reference is released, ask your instructor "
        "for the updated course package (or reinstall it), then restart the kernel.",
        name=name)


class _NotReleasedFinder(_abc.MetaPathFinder):
    """Last on sys.meta_path: asked only when no other finder has the module."""

    tfcourse_reference = __name__

    def find_spec(self, fullname, path=None, target=None):
        if fullname in _UNRELEASED:
            raise _not_released(fullname)
        return None


if _UNRELEASED:
    _sys.meta_path[:] = [f for f in _sys.meta_path
                         if getattr(f, "tfcourse_reference", None) != __name__]  # a reload's
    _sys.meta_path.append(_NotReleasedFinder())

    def __getattr__(name: str):
        # `from tfcourse.reference import nbNN_x` asks hasattr first and would swallow the
        # finder's error into "cannot import name"
        if f"{__name__}.{name}" in _UNRELEASED:
            raise _not_released(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
