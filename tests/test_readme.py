"""The README's quickstart is what CI runs, and what it promises exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_quickstart_has_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = _bash_blocks(quickstart)
    assert len(blocks) == 2 and all("\n" not in b for b in blocks), blocks
    main_cmd, test_cmd = blocks
    assert main_cmd.startswith("pip install -r requirements.txt") and "python -m grader" in main_cmd
    assert "pytest" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_cmd in ci.splitlines(), "the test command in .ci/run must be the README's, verbatim"


def test_requirements_pin_torch_and_environment_does_not_duplicate_them():
    reqs = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert any(re.fullmatch(r"torch==[\d.]+", line.strip()) for line in reqs), "torch must be pinned exactly"
    env = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert "-r requirements.txt" in env
    names = {re.split(r"[<>=\[ ]", line.strip())[0].lower() for line in reqs
             if line.strip() and not line.startswith(("#", "-"))}
    listed = {re.split(r"[<>= ]", line.strip(" -"))[0].lower() for line in env.splitlines()
              if line.startswith("  - ") and "requirements" not in line}
    assert not (names & listed - {"python", "pip"}), f"environment.yml repeats {names & listed}"


def test_folders_named_in_the_readme_exist():
    for name in ("notebooks", "solutions", "grader", "tfcourse", "tests", "docs"):
        assert (ROOT / name).is_dir(), name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for link in re.findall(r"\]\(((?:docs)/[^)]+)\)", readme):
        assert (ROOT / link).exists(), f"README links to missing {link}"
