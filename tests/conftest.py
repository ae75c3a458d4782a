"""Shared pytest fixtures for the main test suite (tests/).

Keep this file small: only fixtures that several test modules use belong here. Several people add
to it (the catalogue harness, other suites); fixtures used by one module live in that module.
"""

import time  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def executed_solutions():
    """``executed_solutions(path)``: the solutions notebook at ``path`` executed top to bottom
    (nbclient, a fresh kernel), and the seconds it took; each notebook is executed once per test
    session and shared by the tests that read its outputs."""
    import nbclient
    import nbformat

    done: dict = {}

    def run(path):
        if path not in done:
            nb = nbformat.read(path, as_version=4)
            client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=False,
                                             resources={"metadata": {"path": str(path.parent)}})
            start = time.perf_counter()
            client.execute()
            done[path] = (nb, time.perf_counter() - start)
        return done[path]

    return run


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """The in-process checks run thousands of tiny tensor ops, for which a second thread only adds
    contention on a 2-core machine (the grader's children run on one thread for the same reason,
    and notebooks and graders run in processes of their own). Measured by the notebook 06 helper
    on the shared machine: one wrong DecoderLM check 7.6 s with two threads, 0.56 s with one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
