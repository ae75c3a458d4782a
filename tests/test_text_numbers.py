"""Every number the text quotes is computed by the notebook: a decimal number written in a
markdown cell of ``solutions/`` must appear, as written, in what the executed notebook printed.

Section numbers (a heading's "7.1", "§3.2", "section 7.2") are not quantities. Numbers inside
LaTeX math (``$…$``, ``$$…$$``) or code spans are definitions and formulas
(``1e-5``, ``\\sqrt{d_k}``, ``0.5`` in a rule), not results, and are not checked. A measured value
that varies from run to run (a timing) must not be quoted as an exact number: print it and say
"about", or refer to the printed table.
"""

from __future__ import annotations

import re

import pytest

from grader.build import SOLUTIONS
from tests import notebook_runs

pytestmark = pytest.mark.slow
SOURCES = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")
HIDDEN = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$|`[^`\n]*`|<code>.*?</code>|\]\([^)]*\)"
                    r"|^#+ *[\d.]+|(?:§|\b[Ss]ections? )[\d.]+(?:(?:,| and| or|–|-) ?[\d.]+)*", re.S | re.M)


def quoted_numbers(markdown: str) -> list[str]:
    """The decimal numbers of a markdown text outside math, code spans and link targets."""
    return NUMBER.findall(HIDDEN.sub(" ", markdown))


def printed_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            for mime in ("text/plain", "text/markdown", "text/html"):
                value = out.get("data", {}).get(mime, "")
                parts.append("".join(value) if isinstance(value, list) else value)
    return "\n".join(parts)


def test_the_scanner_finds_quoted_numbers_and_skips_math_and_code():
    text = "p = 0.881 and 0.119, so 0.105; $e^{0.5}$, `atol=1e-5`, `x = 2.5`, [see](docs/v1.2.md) 3.14."
    assert quoted_numbers(text) == ["0.881", "0.119", "0.105", "3.14"]
    assert quoted_numbers("version 2.13.0 of torch, section 3.2.2 and §7.1, sections 7.1 and 7.2") == []
    assert quoted_numbers("### 7.2 Causal masks\nweights 0.25") == ["0.25"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_every_number_the_text_quotes_is_printed(source):
    nb, _ = notebook_runs.result("solution", source)  # shared with test_notebooks_execute
    printed = printed_text(nb)
    missing = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            missing += [f"cell {i}: {n}" for n in quoted_numbers(cell.source) if n not in printed]
    assert not missing, ("numbers the text quotes that no code cell printed (compute and print them, "
                         f"or put a definition in $math$ or a code span): {missing}")


# A timing demo's conclusion is the run's own: the cell derives the sentence from what it measured
# (tfcourse.timing.compared / trend), and the text refers to that line instead of asserting an
# outcome a busy machine can invert.
DERIVED = {
    "01_attention": ["in this run, the last doubling of T cost x", "in this run, self-attention was the "],
    "02_multi_head_attention": ["in this run, H = 8 was ", "and H = 64 was "],
    "04_normalisation": ["in this run: written the same way, RMSNorm was "],
    "06_kv_cache": ["in this run, from S = ", "(with the cache "],
    "07_gqa_mla": ["times as fast as MHA in this run (", " was ", "in this run the best start: "],
}


@pytest.mark.parametrize("source", [SOLUTIONS / f"{name}.ipynb" for name in sorted(DERIVED)], ids=lambda p: p.stem)
def test_timing_conclusions_are_derived_from_the_run(source):
    name = source.stem
    nb, _ = notebook_runs.result("solution", source)  # shared with test_notebooks_execute
    printed = printed_text(nb)
    missing = [line for line in DERIVED[name] if line not in printed]
    assert not missing, f"{name}: the derived sentences are not printed: {missing}"
    words = re.findall(r"(faster than|slower than|about as fast as|stayed nearly flat|fell|rose|grew"
                       r"|close to|below \(fixed|above \(the machine|the slower layer|the faster layer) ", printed)
    assert words, f"{name}: no measured comparison was printed"
