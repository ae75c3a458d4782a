"""The isolation engine: runs learner code in a sandboxed child process and brings back only
what it returned (JSON and safetensors); it never judges. The rest of ``grader`` calls
:func:`runner.run_notebook` and :func:`sandbox.choose`.

* ``sandbox``: which sandbox (bwrap, unshare, none), the command that starts a child in it,
  watching and stopping the child's processes.
* ``runner``: one notebook's run: the job folder, a child to the end or to a limit, a new child
  for the exercises left when one dies, the results read back.
* ``fastpath``: warm zygotes that start each child as a fork (``TFCOURSE_FAST``).
* ``zygote``: the warm worker itself (a file started as ``python -I``, never imported here).
* ``child``: the child process (a file copied into each job folder, never imported here).
"""
