"""nbgrader configuration for the tfcourse Transformer course (checked against nbgrader 0.9.6).

Use it in one of two ways:

* copy it into the course directory (the folder that holds ``source/``), where every
  ``nbgrader`` command run from that folder picks it up::

      cp grader/nbgrader_config.py ~/course/nbgrader_config.py

* or point each nbgrader command at it, from the course directory (name it without ``.py``;
  nbgrader 0.9.6 has no ``--config`` option: it warns "Unrecognized alias" and ignores it)::

      nbgrader autograde 01_attention --JupyterApp.config_file=/path/to/tfcourse/grader/nbgrader_config

The course directory is the current working directory (nbgrader's default for
``CourseDirectory.root``); set ``root`` below when the formgrader or a JupyterHub service runs
nbgrader from somewhere else. docs/nbgrader.md walks through the whole workflow.

nbgrader runs the tests inside the learner's own kernel, so a hostile submission can fake a pass.
The trustworthy verdict comes from ``python -m grader submitted/* --csv grades.csv``, which grades
the same ``submitted/`` folders with learner code in a separate, limited process.

nbgrader loads this file with traitlets, which ignores (with only a warning in its log) an
option name it does not know; tests/test_nbgrader_roundtrip.py checks every name below against
nbgrader's classes.
"""

c = get_config()  # noqa: F821  (nbgrader defines get_config() when it loads this file)

# --- Course directory --------------------------------------------------------------------------
# One folder per nbgrader step, then one per student, then one per assignment:
#   source/01_attention/01_attention.ipynb            <- copy of solutions/01_attention.ipynb
#   release/01_attention/01_attention.ipynb           <- written by `nbgrader generate_assignment`
#   submitted/<student>/01_attention/01_attention.ipynb
#   autograded/<student>/01_attention/01_attention.ipynb
#   feedback/<student>/01_attention/01_attention.html
# The assignment name is the notebook name (01_attention, 02_multihead, ...): one notebook per
# assignment, so nbgrader's per-assignment scores are per-notebook scores.
c.CourseDirectory.course_id = "tfcourse"  # the exchange (release/collect on JupyterHub) needs one
# c.CourseDirectory.root = "/home/instructor/tfcourse-course"  # default: the current directory
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# The gradebook defaults to sqlite:///<root>/gradebook.db.
# c.CourseDirectory.db_url = "sqlite:////home/instructor/tfcourse-course/gradebook.db"

# --- Releasing: what replaces a solution region ------------------------------------------------
# The same stub as `python -m grader.build` writes into notebooks/ (it runs nbgrader's own
# ClearSolutions with its default), so the notebooks nbgrader releases are the committed
# notebooks/ cell for cell, checksums included, and our grader recognises an untouched stub.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# --- Autograding --------------------------------------------------------------------------------
# Seconds per cell before the kernel is interrupted (nbgrader's default is 30). The slowest cells
# of the course (hidden tests, demos) take a few seconds on a 2-core laptop; 120 leaves room for
# a busy JupyterHub node without letting an endless loop hold the batch for long. A loop that
# ignores the interrupt still stalls nbgrader: our grader kills it from outside.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

# nbgrader scores a test cell 0 when anything reaches stderr, so a harmless warning from torch or
# from the learner's code (`file.py:3: UserWarning: ...`) would zero a correct answer. IgnorePattern
# drops stderr outputs that match `pattern`; it does nothing unless BOTH options are set.
# Only Python warning lines match: a failing check raises, which nbgrader records as an error
# output, not a stderr stream, so this cannot turn a failure into a pass.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(?m)^.*:\d+: \w*Warning: "

# --- Exchange (JupyterHub) ----------------------------------------------------------------------
# `nbgrader release_assignment`, `collect` and `release_feedback` (and the learners' fetch and
# submit, formgrader's release buttons) go through this shared folder; it must exist and be
# writable by everyone (mode 777). `python -m grader.instructor init --exchange DIR` writes this
# line (default: nbgrader's own default, below) and creates the folder when it can. The learners'
# nbgrader needs the same root and course_id: on JupyterHub, in /etc/jupyter/nbgrader_config.py.
c.Exchange.root = "/usr/local/share/nbgrader/exchange"
