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
# notebook: the later notebooks whose imports cell imports its reference
IMPORTED_BY = {"01_attention": ["02_multi_head_attention", "03_positional_encodings", "04_normalisation", "06_kv_cache", "07_gqa_mla"], "02_multi_head_attention": ["03_positional_encodings", "04_normalisation", "08_real_weights"], "03_positional_encodings": ["06_kv_cache", "07_gqa_mla", "08_real_weights"], "04_normalisation": ["05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"], "05_feed_forward": ["06_kv_cache", "08_real_weights"], "06_kv_cache": ["07_gqa_mla", "08_real_weights"], "07_gqa_mla": ["08_real_weights"]}

_UNRELEASED = {f"{__name__}.nb{n}": n for n in COURSE if n not in NOTEBOOKS}


def _number(notebook: str) -> str:
    return notebook.split("_", 1)[0]


def _not_released(name: str) -> ModuleNotFoundError:
    notebook = _UNRELEASED[name]
    number = _number(notebook)
    held = f"notebooks {_number(NOTEBOOKS[0])}-{_number(NOTEBOOKS[-1])}" if NOTEBOOKS else "no notebook"
    lines = [f"No module named {name!r}: the reference solutions of notebook {number} ({notebook}) "
             f"are not in this course environment yet (it holds those of {held}). Your instructor "
             "releases them after that notebook's due date."]
    importers = [_number(n) for n in IMPORTED_BY.get(notebook, [])]
    if importers:
        which = " or ".join(filter(None, [", ".join(importers[:-1]), importers[-1]]))
        lines.append(
            f"If this is the imports cell of notebook {which} (it needs notebook "
            f"{number}'s components): this course environment is too old for the notebook you are "
            "opening. Do not skip that cell: ask your instructor for the course package built for "
            "this notebook (it holds the reference of every notebook before it), then restart the "
            "kernel.")
    lines.append(
        f"If this cell comes after an exercise of notebook {number} and only compares your code with "
        "the reference, or demonstrates it, skip it: your own implementation above is what is "
        f"graded, not this cell. To run it later: once notebook {number}'s reference is released, "
        "ask your instructor for the updated course package (or reinstall it), then restart the "
        "kernel.")
    return ModuleNotFoundError("\n".join(lines), name=name)


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
