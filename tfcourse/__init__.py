"""tfcourse: the helper library of the Transformer course.

Notebooks import from here: the checks that run under each exercise (``tfcourse.checks``),
plots (``tfcourse.plots``), a timing helper (``tfcourse.timing``), device and seed helpers
(``tfcourse.device``), the notebook reader the grader uses (``tfcourse.notebook``) and the
reference components exported from the solution notebooks (``tfcourse.reference``).

Notation used everywhere (docs/conventions.md): B batch, T query length, S key length,
P cached tokens, D model width, H query heads, G key/value heads, Dh head width.
"""

__version__ = "0.1.0"
