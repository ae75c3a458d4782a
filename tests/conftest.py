"""Shared pytest fixtures for the main test suite (tests/).

Keep this file small: only fixtures that several test modules use belong here. Several people add
to it (the catalogue harness, other suites); fixtures used by one module live in that module.
"""

import pytest  # noqa: E402


def pytest_collection_finish(session):
    """Start executing, on the second core, the notebooks the selected slow tests will read
    (tests/notebook_runs.py); nothing starts when none is selected or with --collect-only."""
    if session.config.option.collectonly:
        return
    from tests import notebook_runs

    notebook_runs.start(session.items)


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
