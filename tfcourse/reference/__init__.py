"""Reference components exported from the solution notebooks by `python -m grader.build`.

Later notebooks import earlier notebooks' components from here, so a learner who is stuck
on one notebook can still do the next. GENERATED: do not edit.

NOTEBOOKS names the notebooks whose module this install holds (a learner environment built by
`python -m grader.instructor learner-env --through NN` only those up to NN), COURSE all of them.
Importing a course notebook's module left out here raises ModuleNotFoundError saying why
(tfcourse/unreleased.py).
"""

from tfcourse.unreleased import install as _install

NOTEBOOKS = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation", "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]
COURSE = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation", "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]
# notebook: the later notebooks whose imports cell imports its reference
IMPORTED_BY = {"01_attention": ["02_multi_head_attention", "03_positional_encodings", "04_normalisation", "06_kv_cache", "07_gqa_mla"], "02_multi_head_attention": ["03_positional_encodings", "04_normalisation", "08_real_weights"], "03_positional_encodings": ["06_kv_cache", "07_gqa_mla", "08_real_weights"], "04_normalisation": ["05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"], "05_feed_forward": ["06_kv_cache", "08_real_weights"], "06_kv_cache": ["07_gqa_mla", "08_real_weights"], "07_gqa_mla": ["08_real_weights"]}

_getattr = _install(__name__, NOTEBOOKS, COURSE, IMPORTED_BY)
if _getattr is not None:
    __getattr__ = _getattr
