"""Reference components exported from the solution notebooks by `python -m grader.build`
(GENERATED: do not edit). Later notebooks import earlier notebooks' components from here, so a
learner stuck on one notebook can still do the next. NOTEBOOKS: the notebooks whose module this
install holds; COURSE: all of them (tfcourse/unreleased.py: why a module left out fails)."""

from tfcourse.unreleased import install as _install

NOTEBOOKS = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation", "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]
COURSE = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation", "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]
# notebook: the later notebooks whose imports cell imports its reference
IMPORTED_BY = {"01_attention": ["02_multi_head_attention", "03_positional_encodings", "04_normalisation", "06_kv_cache", "07_gqa_mla"], "02_multi_head_attention": ["03_positional_encodings", "04_normalisation", "08_real_weights"], "03_positional_encodings": ["06_kv_cache", "07_gqa_mla", "08_real_weights"], "04_normalisation": ["05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"], "05_feed_forward": ["06_kv_cache", "08_real_weights"], "06_kv_cache": ["07_gqa_mla", "08_real_weights"], "07_gqa_mla": ["08_real_weights"]}

_getattr = _install(__name__, NOTEBOOKS, COURSE, IMPORTED_BY)
if _getattr is not None:
    __getattr__ = _getattr
