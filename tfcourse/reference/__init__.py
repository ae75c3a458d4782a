"""Reference components exported from the solution notebooks by `python -m grader.build`.

Later notebooks import earlier notebooks' components from here, so a learner who is stuck
on one notebook can still do the next. GENERATED: do not edit.
"""

NOTEBOOKS = ["01_attention", "02_multi_head_attention", "03_positional_encodings", "04_normalisation", "05_feed_forward", "06_kv_cache", "07_gqa_mla", "08_real_weights"]
