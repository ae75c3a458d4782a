"""The isolation engine: runs learner code in a sandboxed child process and brings back only
what it returned (JSON and safetensors); it never judges. The rest of ``grader`` calls
``runner.run_notebook``, ``sandbox.choose`` and ``views.protect``.

In the grading process:

* ``runner``: one notebook's run: its job folder, a child run to the end or to a limit, a fresh
  child for the exercises left when one dies, the results read back from a pipe.
* ``sandbox``: which sandbox (bwrap, unshare, none): probed once, ``TFCOURSE_SANDBOX``, auto's
  fallback and its warning, a batch's refusal.
* ``views``: what the child sees in each sandbox and the command that starts it there; the
  folders every view hides (``protect``) and the folder of the job folders.
* ``watch``: the child's processes, threads and memory seen from outside, and killing them all.
* ``fastpath``: warm zygotes that start each child as a fork (``TFCOURSE_FAST``).
* ``jobfolder``: what a job folder holds: the program, linux.py, the library copy.

Files that run in other processes (copied into job folders, started with ``python -I``, never
imported by the grading process but ``linux``):

* ``child``: the child, which runs the learner's cells and the cases' calls.
* ``zygote``: the fast path's warm worker, which forks the children.
* ``linux``: the Linux calls (mounts, capabilities, the unshare view, the process tree), standard
  library only.
"""
