"""Shared pytest fixtures for the main test suite (tests/).

Keep this file small: only fixtures that several test modules use belong here. Several people add
to it (the catalogue harness, other suites); fixtures used by one module live in that module.
"""
