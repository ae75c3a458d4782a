"""Hostile submissions: one or more per kind of attack in docs/grading.md
("What a submission can try, and what happens").

Each :class:`Hostile` is the solutions notebook of notebook 01 with one thing changed: one
exercise's cell replaced by hostile code (``cells``), or the notebook file itself mangled
(``mangle``). ``tests/test_adversarial.py`` builds them all, grades them through the real CLI
and checks, for each, the verdict of the exercise it touches (``expect``, ``feedback``) and that
every other exercise still passes with full points.

Cell sources may hold placeholders, filled in per test run (see ``fill``):

* ``@@SOLUTION@@`` the exercise's solution cell, ``@@WRONG@@`` a wrong implementation of it;
* ``@@SLEEP@@`` an argument for ``sleep`` that marks the processes this suite starts, so the
  test can find any left running; ``@@PORT@@`` a port the test listens on (127.0.0.1);
* ``@@ROOT@@`` the course checkout, ``@@LIBRARY@@`` the installed ``tfcourse`` package,
  ``@@SUBMISSIONS@@`` the folder holding every submission of the batch, ``@@REPORT@@`` the JSON
  report's path, ``@@SECRET@@`` the value of an environment variable of the grading process.

``needs``: what the attack's assertions rely on beyond what every mode gives: ``"files"`` (a
private file view: bwrap, or unshare's mount-namespace view; attacks that try to read or
overwrite course files run only there), ``"network"`` (bwrap or unshare), ``"pidns"`` (bwrap or
unshare: a process that leaves the process group still dies with the child).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nbformat

NOTEBOOK = "01_attention"
EXERCISES = ("softmax", "softmax_jacobian", "scaled_dot_product_attention", "causal_mask", "padding_mask",
             "memory_efficient_attention")

# Kinds, as the rows of that table.
KINDS = ("endless loop", "memory bomb", "process tricks", "output flood", "faking equality",
         "patching the judge", "forging the report", "peeking", "network", "broken notebooks",
         "environment drift", "unattempted")

# Plausible wrong answers (each loses its exercise's points through the honest grader).
WRONG = {
    "softmax": "def softmax(x, dim=-1):\n    return torch.exp(x)  # not normalised\n",
    "softmax_jacobian": "def softmax_jacobian(p):\n    return torch.diag(p)  # forgets - p p^T\n",
    "scaled_dot_product_attention": (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)  # no 1/sqrt(Dh), mask ignored\n"
        "    return weights @ v, weights\n"),
    "causal_mask": (
        "def causal_mask(t_q, t_k=None, *, device=None):\n"
        "    t_k = t_q if t_k is None else t_k\n"
        "    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril()  # top-left aligned\n"),
    "padding_mask": (
        "def padding_mask(lengths, t_k):\n"
        "    j = torch.arange(t_k, device=lengths.device)\n"
        "    return (j[None, :] <= lengths[:, None])[:, None, None, :]  # off by one\n"),
}


@dataclass(frozen=True)
class Hostile:
    """One hostile submission and what the grader must make of it.

    expect: status of the exercises it touches (every other exercise: "passed", full points).
    feedback: substrings each touched exercise's feedback must hold.
    output_has / output_lacks: substrings the notebook's captured learner output must / must not
    hold. notebook_status: the notebook's status in the report.
    filename: the file's name in the submission folder, or None for no file at all; as_file:
    the submission is the notebook file itself rather than a folder.
    """

    name: str
    kind: str
    cells: dict[str, str] = field(default_factory=dict)
    mangle: Callable[[Any], Any] | None = None
    expect: dict[str, str] = field(default_factory=dict)
    feedback: dict[str, tuple[str, ...]] = field(default_factory=dict)
    output_has: tuple[str, ...] = ()
    output_lacks: tuple[str, ...] = ()
    notebook_status: str = "graded"
    needs: str = ""
    filename: str | None = "01_attention.ipynb"
    as_file: bool = False


def fill(source: str, exercise: str, ctx: dict[str, str], solutions: dict[str, str]) -> str:
    """``source`` with its placeholders replaced (see the module docstring)."""
    source = source.replace("@@SOLUTION@@", solutions[exercise]).replace("@@WRONG@@", WRONG[exercise])
    for key, value in ctx.items():
        source = source.replace(f"@@{key}@@", value)
    return source


# --- notebook manglers: (notebook node, solutions, stubs) -> notebook node, str or bytes --------
def _cells_of(nb, grade_id: str) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]


def _delete_cell(nb, **_):
    del nb.cells[_cells_of(nb, "causal_mask")[0]]
    return nb


def _duplicate_cell(nb, **_):
    i = _cells_of(nb, "softmax")[0]
    copy = nbformat.from_dict(dict(nb.cells[i]))
    copy["source"] = WRONG["softmax"]
    copy["id"] = "duplicated-softmax"
    nb.cells.insert(i + 2, copy)  # a later cell with the same grade_id, holding a wrong answer
    return nb


def _to_markdown(nb, **_):
    i = _cells_of(nb, "scaled_dot_product_attention")[0]
    cell = nb.cells[i]
    nb.cells[i] = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    return nb


def _strip_metadata(nb, **_):
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    return nb


def _depends_on_free_cell(nb, **_):
    i = _cells_of(nb, "scaled_dot_product_attention")[0]
    helper = nbformat.v4.new_code_cell("def scale(x):\n    return x / math.sqrt(x.shape[-1])\n")
    nb.cells.insert(i, helper)  # a learner-added cell: run before the exercise, as Run All would
    nb.cells[i + 1].source = (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    scores = scale(q) @ k.transpose(-2, -1)  # uses the helper of another cell\n"
        "    if mask is not None:\n"
        "        scores = torch.where(mask, scores, torch.full_like(scores, float('-inf')))\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    if mask is not None:\n"
        "        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))\n"
        "    return weights @ v, weights\n")
    return nb


def _depends_on_demo_cell(nb, **_):
    """The helper is written into one of the course's demo cells (it keeps its id): the grader
    does not run demo cells, so the answer meets a NameError, and the feedback gives the rule."""
    nb = _depends_on_free_cell(nb)
    i = _cells_of(nb, "scaled_dot_product_attention")[0]
    helper = nb.cells.pop(i - 1)
    demo = next(c for c in nb.cells if c.cell_type == "code" and not c.get("metadata", {}).get("nbgrader")
                and not c.get("metadata", {}).get("tfcourse", {}).get("setup") and "import" not in c.source[:40])
    demo.source = helper.source + "\n\n" + demo.source
    return nb


def _depends_on_stub(nb, stubs, **_):
    nb.cells[_cells_of(nb, "softmax")[0]].source = stubs["softmax"]
    nb.cells[_cells_of(nb, "scaled_dot_product_attention")[0]].source = (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
        "    if mask is not None:\n"
        "        scores = torch.where(mask, scores, torch.full_like(scores, float('-inf')))\n"
        "    weights = softmax(scores, dim=-1)  # the learner's own softmax, still a stub\n"
        "    return weights @ v, weights\n")
    return nb


def _nbformat3(nb, **_):
    return nbformat.writes(nbformat.convert(nb, 3), version=3)


def _stub(exercise: str):
    def mangle(nb, stubs, **_):
        nb.cells[_cells_of(nb, exercise)[0]].source = stubs[exercise]
        return nb
    return mangle


# --- the hostile cells ------------------------------------------------------------------------
LOOP_PLAIN = """\
def softmax(x, dim=-1):
    while True:  # an endless loop
        pass
"""

LOOP_DEAF = """\
import signal
for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGHUP):
    signal.signal(_sig, signal.SIG_IGN)  # deaf to everything a polite grader would send
_n = 0
while True:  # endless, at definition time
    _n += 1
@@SOLUTION@@"""

LOOP_MATMUL = """\
def scaled_dot_product_attention(q, k, v, mask=None):
    a = torch.ones(5000, 5000) / 5000
    while True:  # long C calls: each matmul runs for seconds without returning to Python
        a = torch.mm(a, a)
"""

SLEEP_IN_C = """\
import time
def causal_mask(t_q, t_k=None, *, device=None):
    time.sleep(10**6)  # one C call that never returns
"""

MEM_ONE_ALLOCATION = """\
def softmax(x, dim=-1):
    hog = torch.empty(100 * 2**30, dtype=torch.uint8)  # 100 GiB at once
    return torch.softmax(x, dim)
"""

MEM_GROWING_LIST = """\
hog = []
while True:  # grows forever, at definition time; the list stays referenced
    hog.append([0] * 2**20)
@@SOLUTION@@"""

MEM_RAISE_LIMIT = """\
import resource
try:
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("RLIMIT-RAISED")
except (ValueError, OSError) as exc:
    print("RLIMIT-KEPT", exc)
def scaled_dot_product_attention(q, k, v, mask=None):
    hog = torch.ones(3 * 2**30 // 4)  # 3 GiB, touched
    return hog, hog
"""

MEM_MANY_PROCESSES = """\
import os, time
def causal_mask(t_q, t_k=None, *, device=None):
    for _ in range(6):  # each process stays under the address-space limit; together they don't
        if os.fork() == 0:
            try:
                hog = b"x" * (400 * 2**20)
                time.sleep(1000)
            finally:
                os._exit(0)
    time.sleep(1000)
"""

SYS_EXIT = """\
import sys
def softmax_jacobian(p):
    sys.exit(0)
"""

BUILTIN_EXIT = """\
def causal_mask(t_q, t_k=None, *, device=None):
    exit()
"""

OS_EXIT = """\
import os
def scaled_dot_product_attention(q, k, v, mask=None):
    os._exit(0)
"""

SEGFAULT = """\
import ctypes
def padding_mask(lengths, t_k):
    return ctypes.string_at(0)  # reads address 0: SIGSEGV
"""

FORK_LOOP = """\
import subprocess
def softmax(x, dim=-1):
    for _ in range(2000):  # processes in a loop (bounded here, so that a broken grader can't sink CI)
        subprocess.Popen(["sleep", "@@SLEEP@@"])
    return torch.softmax(x, dim)
"""

BACKGROUND = """\
import subprocess
_bg = subprocess.Popen(["sleep", "@@SLEEP@@"], start_new_session=True)
print("BACKGROUND-STARTED", _bg.pid)
@@SOLUTION@@"""

DOUBLE_FORK = """\
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        try:
            os.execvp("sleep", ["sleep", "@@SLEEP@@"])
        finally:
            os._exit(0)
    os._exit(0)
os.wait()
print("DAEMON-STARTED")
@@SOLUTION@@"""

# strings no UTF-8 writer accepts (a lone surrogate), NUL, a terminal escape and a very long line, in
# the exception text and in the output: the report must still be written, with every row
ODD_STRINGS = """\
import sys
sys.stdout.flush()
sys.stdout.buffer.write(b"ODD-OUT \\xed\\xa0\\x80 \\x00 \\x1b[2J end\\n")  # a UTF-8-encoded surrogate
sys.stdout.buffer.flush()
def softmax(x, dim=-1):
    raise ValueError("ODD-RAISED \\udfff\\ud800 \\x00\\x1b[31m" + "z" * 100_000)
"""

OUTPUT_FLOOD = """\
import sys, time
_t = time.time()
while time.time() - _t < 2:  # as much output as it can for 2 s
    print("x" * 100_000)
    sys.stderr.write("y" * 100_000 + "\\n")
@@SOLUTION@@"""

def _disk_filler(paths: str, chunks: int, ok: str, stopped: str) -> str:
    """A cell that writes ``chunks`` chunks of 16 MiB to each file the Python expression ``paths``
    yields, then prints ``ok``; when a limit stops it (OSError), it prints ``stopped`` and why."""
    return f"""\
import os
_chunk = b"\\0" * (16 * 2**20)
try:
    for _path in {paths}:
        with open(_path, "wb") as _fh:
            for _ in range({chunks}):
                _fh.write(_chunk)
    print("{ok}")
except OSError as _exc:
    print("{stopped}", _exc)
@@SOLUTION@@"""


# one file of 1 GiB; then 40 files of 128 MiB in each writable place, each under the file size limit
BIG_FILE = _disk_filler('["big.bin"]', 64, "BIG-FILE-WRITTEN", "BIG-FILE-STOPPED")
MANY_FILES = _disk_filler('(os.path.join(_where, f"fill{_i}.bin") for _i in range(40) for _where in (".", "/tmp", "/dev/shm"))',
                          8, "DISK-FILLED", "DISK-STOPPED")

FAKE_EQUAL_OBJECT = """\
class AlwaysEqual:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __bool__(self): return True
    def allclose(self, *args, **kwargs): return True
    def __getattr__(self, name): return lambda *args, **kwargs: self

def softmax(x, dim=-1):
    return AlwaysEqual()
"""

TENSOR_SUBCLASS = """\
class Agreeable(torch.Tensor):
    def __eq__(self, other): return torch.ones(self.shape, dtype=torch.bool)
    def __ne__(self, other): return torch.zeros(self.shape, dtype=torch.bool)
    def allclose(self, *args, **kwargs): return True
    def equal(self, *args, **kwargs): return True

def scaled_dot_product_attention(q, k, v, mask=None):
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype).as_subclass(Agreeable)
    weights = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype).as_subclass(Agreeable)
    return out, weights
"""

PATCH_TORCH = """\
import torch.testing
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(a, dtype=torch.bool)
torch.testing.assert_close = lambda *args, **kwargs: None
@@WRONG@@"""

PATCH_BUILTINS = """\
import builtins
class _NeverRaised(Exception):
    pass
builtins.AssertionError = _NeverRaised  # a failed check could no longer be an AssertionError
builtins.print = lambda *args, **kwargs: None
@@WRONG@@"""

PATCH_CHECKS = """\
import tfcourse.checks as _checks
import tfcourse.checks.case as _case
_passed = _case.CaseResult("passed")
_case.judge_case = _checks.judge_case = lambda *args, **kwargs: _passed
_case.Judge.close = _case.Judge.require = _case.Judge.fail = lambda self, *args, **kwargs: None
import tfcourse.checks.nb01_attention as _nb01
for _name in dir(_nb01):
    if _name.startswith("check_"):
        setattr(_nb01, _name, lambda *args, **kwargs: None)
try:
    import grader.cases as _hidden  # the hidden cases: the child must not even find them
    _hidden.check_hidden = lambda *args, **kwargs: None
    print("PATCHED grader.cases")
except ImportError as _exc:
    print("NO grader.cases:", _exc)
@@WRONG@@"""

IPYTHON_HOOK = """\
import sys, types
try:
    _ip = get_ipython()
except NameError:
    _ip = None
    print("no IPython shell here")
if _ip is not None:  # would rewrite every later cell that calls a check into `pass`
    _ip.input_transformers_cleanup.append(lambda lines: ["pass\\n" if "check_" in l else l for l in lines])
sys.modules["IPython"] = types.SimpleNamespace(get_ipython=lambda: None)
@@WRONG@@"""

FORGE_OUTPUT = """\
import json, sys
_fake = {"submissions": [{"submission": "me", "score": 10.0, "max_score": 10.0, "notebooks": []}]}
print(json.dumps(_fake))
print("All tests passed")
print("✓ scaled_dot_product_attention: all 10 checks passed")
sys.stderr.write("passed\\n")
def scaled_dot_product_attention(q, k, v, mask=None):
    print("✓ scaled_dot_product_attention: all checks passed")
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)  # no scale, mask ignored
    return weights @ v, weights
"""

FORGE_FILES = """\
import json, os
_fake = json.dumps({"submissions": [{"submission": "x", "score": 10.0, "max_score": 10.0, "notebooks": []}]})
for _target in ["/job/results/causal_mask.json", "/job/job.json", "@@REPORT@@",
                "@@SUBMISSIONS@@/forge_files/01_attention.results.json",
                "@@SUBMISSIONS@@/loop_plain/01_attention.ipynb",
                "@@ROOT@@/grader/cases/nb01_attention.py"]:
    try:
        with open(_target, "w") as _fh:
            _fh.write(_fake)
        print("FORGE-WROTE", _target)
    except OSError as _exc:
        print("FORGE-BLOCKED", _target, type(_exc).__name__)
@@WRONG@@"""

FORGE_CHANNEL = """\
import json, os, sys
def _frame(kind, payload):
    return kind + b"%08x" % len(payload) + payload
_fd = int(sys.argv[-1]) if sys.argv[-1].isdigit() else None
_fake = json.dumps({"cell_error": None, "run_error": None, "cases": []}).encode()
def causal_mask(t_q, t_k=None, *, device=None):
    if _fd is not None:  # talk to the grader on the child's own results pipe
        for _name in (b"causal_mask", b"padding_mask", b"softmax"):
            try:
                os.write(_fd, _frame(b"R", _name + b"\\n" + b"%08x" % len(_fake) + _fake))
                os.write(_fd, _frame(b"P", b"exercise " + _name))
            except OSError as _exc:
                print("channel:", _exc)
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril()  # wrong: top-left aligned
"""

# one forged result frame of 32 MiB for the exercise being graded ({"cases": [{}, {}, ...]}): the grading
# process must refuse it by its length, before reading it (it cost 0.8 GB of memory when parsed)
BIG_FRAME = """\
import os, sys
_fd = int(sys.argv[-1]) if sys.argv[-1].isdigit() else None
def softmax(x, dim=-1):
    if _fd is not None:
        _meta = b'{"cases": [' + b"{}, " * (8 * 2**20 - 1) + b'{}]}'
        _body = b"softmax\\n" + b"%08x" % len(_meta) + _meta
        try:
            os.write(_fd, b"R" + b"%08x" % len(_body) + _body)
        except OSError as _exc:
            print("channel:", _exc)
    return torch.softmax(x, dim)
"""

PEEK = """\
import glob, os
for _path in ["@@ROOT@@/solutions/01_attention.ipynb", "@@ROOT@@/tfcourse/reference/nb01_attention.py",
              "@@LIBRARY@@/reference/nb01_attention.py", "@@ROOT@@/grader/cases/nb01_attention.py",
              "@@SUBMISSIONS@@/loop_plain/01_attention.ipynb", "@@REPORT@@",
              "/job/lib/tfcourse/reference/nb01_attention.py"]:
    try:
        with open(_path, "rb") as _fh:
            _fh.read(10)
        print("PEEK-FOUND", _path)
    except OSError as _exc:
        print("PEEK-BLOCKED", _path, type(_exc).__name__)
for _module in ("grader.cases", "grader.cases.nb01_attention", "tfcourse.reference.nb01_attention"):
    try:
        __import__(_module)
        print("PEEK-FOUND module", _module)
    except ImportError:
        print("PEEK-BLOCKED module", _module)
if "@@SECRET@@" in repr(dict(os.environ)):
    print("PEEK-FOUND the secret in the environment")
for _path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
    try:
        with open(_path, "rb") as _fh:
            _data = _fh.read()
    except OSError:
        continue
    if b"@@SECRET@@" in _data or b"@@SUBMISSIONS@@" in _data:
        print("PEEK-FOUND in", _path)
for _top in ("/", "/tmp", "/job", "/job/lib/tfcourse/reference"):
    try:
        print("PEEK-LIST", _top, sorted(os.listdir(_top)))
    except OSError:
        pass
print("PEEK-DONE")
@@SOLUTION@@"""

# Issue 15: walk up from the working directory (and from where a course checkout and the batch's
# submissions usually lie) looking for a notebook that holds the reference solution, execute it,
# and read other submissions of the batch; zeros if nothing is found. Bounded (depth, 3 s).
FS_WALK = """\
import json, os, time
_t0 = time.monotonic()
_starts, _seen, _hits = [], set(), []
for _p in (os.getcwd(), "@@ROOT@@", "@@SUBMISSIONS@@"):
    while True:
        _starts.append(_p)
        if _p == os.path.dirname(_p):
            break
        _p = os.path.dirname(_p)
def _search(top, depth):
    if depth < 0 or top in _seen or time.monotonic() - _t0 > 3:
        return
    _seen.add(top)
    try:
        _entries = list(os.scandir(top))
    except OSError:
        return
    for _e in _entries:
        try:
            if _e.is_file() and _e.name.endswith(".ipynb"):
                with open(_e.path, encoding="utf-8") as _fh:
                    _text = _fh.read()
                if "### BEGIN SOLUTION" in _text and "def scaled_dot_product_attention" in _text:
                    _hits.append((_e.path, _text))
            elif _e.is_dir(follow_symlinks=False) and _e.name not in (
                    "proc", "sys", "dev", "usr", "site-packages", ".git", "__pycache__", "node_modules"):
                _search(_e.path, depth - 1)
        except (OSError, UnicodeDecodeError):
            pass
for _s in _starts:
    _search(_s, 3)
def scaled_dot_product_attention(q, k, v, mask=None):  # the learner's own answer: zeros
    return (torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype),
            torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype))
for _path, _text in _hits[:8]:
    print("WALK-FOUND", _path, "(another submission)" if "@@SUBMISSIONS@@" in _path else "")
_reference = None
for _path, _text in _hits:
    try:
        _cells = json.loads(_text)["cells"]
    except (ValueError, KeyError, TypeError):
        continue
    for _cell in _cells:
        _src = "".join(_cell.get("source", ""))
        if (_cell.get("cell_type") == "code" and "### BEGIN SOLUTION" in _src and "WALK-" not in _src
                and "def scaled_dot_product_attention" in _src):
            _reference = _reference or _src
if _reference is not None:
    exec(_reference, globals())  # the reference replaces the zeros
    print("WALK-FOUND the reference solution")
print("WALK-DONE", len(_seen), "folders,", len(_hits), "found")
"""

NETWORK = """\
import socket
try:
    _s = socket.create_connection(("127.0.0.1", @@PORT@@), timeout=2)
    _s.sendall(b"the answer, please")
    print("NET-CONNECTED")
except OSError as _exc:
    print("NET-BLOCKED", type(_exc).__name__)
@@SOLUTION@@"""

DRIFT = {
    "softmax": """\
import sys, warnings
warnings.warn("a harmless warning at definition", UserWarning)
print("harmless text on stderr", file=sys.stderr)
@@SOLUTION@@
_softmax = softmax
def softmax(x, dim=-1):
    warnings.warn("a harmless warning in every call", UserWarning)
    return _softmax(x, dim)
""",
    "softmax_jacobian": """\
torch.manual_seed(1234)
torch.set_default_dtype(torch.float64)  # would make torch.eye below float64 if the grader kept it
def softmax_jacobian(p):
    if p.dim() != 1:
        raise ValueError(f"p must be a vector of shape (N,), got shape {tuple(p.shape)}")
    return torch.eye(p.shape[0]) * p - torch.outer(p, p)
""",
    "scaled_dot_product_attention": """\
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_float32_matmul_precision("medium")
@@SOLUTION@@""",
    "causal_mask": "torch.set_num_threads(8)\ntorch.use_deterministic_algorithms(True)\n@@SOLUTION@@",
    "padding_mask": "import random\nrandom.seed(7)\ntorch.manual_seed(7)\n@@SOLUTION@@",
}

SYNTAX_ERROR = "def softmax_jacobian(p):\n    return torch.diag(p) - torch.outer(p, p))\n"
IMPORT_ERROR = "import definitely_not_a_module_xyz\n@@SOLUTION@@"


def _write(text: str | bytes):
    return lambda nb, **_: text


ATTACKS: list[Hostile] = [
    # endless loops (first: they take longest)
    Hostile("loop_plain", "endless loop", {"softmax": LOOP_PLAIN},
            expect={"softmax": "timeout"}, feedback={"softmax": ("s of CPU time", "--timeout")}),
    Hostile("loop_deaf_to_signals", "endless loop", {"softmax_jacobian": LOOP_DEAF},
            expect={"softmax_jacobian": "timeout"},
            feedback={"softmax_jacobian": ("while defining the cell", "--timeout")}),
    Hostile("loop_in_matmul", "endless loop", {"scaled_dot_product_attention": LOOP_MATMUL},
            expect={"scaled_dot_product_attention": "timeout"},
            feedback={"scaled_dot_product_attention": ("--timeout",)}),
    Hostile("sleep_in_c", "endless loop", {"causal_mask": SLEEP_IN_C},
            expect={"causal_mask": "timeout"}, feedback={"causal_mask": ("wall-clock time, the backstop", "--timeout")}),
    # memory bombs
    Hostile("memory_one_allocation", "memory bomb", {"softmax": MEM_ONE_ALLOCATION},
            expect={"softmax": "error"}, feedback={"softmax": ("memory limit exceeded", "--memory")}),
    Hostile("memory_growing_list", "memory bomb", {"padding_mask": MEM_GROWING_LIST},
            expect={"padding_mask": "error"}, feedback={"padding_mask": ("memory limit exceeded", "--memory")}),
    Hostile("memory_after_raising_rlimit", "memory bomb", {"scaled_dot_product_attention": MEM_RAISE_LIMIT},
            expect={"scaled_dot_product_attention": "error"},
            feedback={"scaled_dot_product_attention": ("memory limit exceeded", "--memory")}),
    Hostile("memory_in_many_processes", "memory bomb", {"causal_mask": MEM_MANY_PROCESSES},
            expect={"causal_mask": "error"}, feedback={"causal_mask": ("memory limit exceeded", "--memory")}),
    # process tricks
    Hostile("sys_exit", "process tricks", {"softmax_jacobian": SYS_EXIT},
            expect={"softmax_jacobian": "error"}, feedback={"softmax_jacobian": ("SystemExit",)}),
    Hostile("builtin_exit", "process tricks", {"causal_mask": BUILTIN_EXIT},
            expect={"causal_mask": "error"}, feedback={"causal_mask": ("SystemExit",)}),
    Hostile("os_exit", "process tricks", {"scaled_dot_product_attention": OS_EXIT},
            expect={"scaled_dot_product_attention": "error"},
            feedback={"scaled_dot_product_attention": ("exited with status 0",)}),
    Hostile("segfault", "process tricks", {"padding_mask": SEGFAULT},
            expect={"padding_mask": "error"}, feedback={"padding_mask": ("segmentation fault",)}),
    Hostile("fork_loop", "process tricks", {"softmax": FORK_LOOP},
            expect={"softmax": "error"}, feedback={"softmax": ("process limit exceeded",)}),
    Hostile("background_process", "process tricks", {"causal_mask": BACKGROUND},
            output_has=("BACKGROUND-STARTED",)),
    Hostile("double_fork_setsid", "process tricks", {"padding_mask": DOUBLE_FORK},
            output_has=("DAEMON-STARTED",)),
    # output floods and files
    Hostile("output_flood", "output flood", {"softmax": OUTPUT_FLOOD},
            output_has=("more bytes of output discarded", "--output")),
    Hostile("big_file", "output flood", {"causal_mask": BIG_FILE},
            output_has=("BIG-FILE-STOPPED",), output_lacks=("BIG-FILE-WRITTEN",)),
    Hostile("many_files", "output flood", {"softmax_jacobian": MANY_FILES},
            output_has=("DISK-STOPPED",), output_lacks=("DISK-FILLED",), needs="files"),
    # faking equality
    Hostile("always_equal_object", "faking equality", {"softmax": FAKE_EQUAL_OBJECT},
            expect={"softmax": "failed"}, feedback={"softmax": ("AlwaysEqual", "expected one torch.Tensor")}),
    Hostile("tensor_subclass", "faking equality", {"scaled_dot_product_attention": TENSOR_SUBCLASS},
            expect={"scaled_dot_product_attention": "failed"},
            feedback={"scaled_dot_product_attention": ("Agreeable", "plain torch.Tensor")}),
    # patching the judge (each with a wrong answer that the patch would let through)
    Hostile("patch_torch", "patching the judge", {"softmax": PATCH_TORCH}, expect={"softmax": "failed"}),
    Hostile("patch_builtins", "patching the judge", {"causal_mask": PATCH_BUILTINS},
            expect={"causal_mask": "failed"}),
    Hostile("patch_checks", "patching the judge", {"padding_mask": PATCH_CHECKS},
            expect={"padding_mask": "failed"}),
    Hostile("ipython_hook", "patching the judge", {"softmax_jacobian": IPYTHON_HOOK},
            expect={"softmax_jacobian": "failed"}),
    # forging the report
    Hostile("forge_output", "forging the report", {"scaled_dot_product_attention": FORGE_OUTPUT},
            expect={"scaled_dot_product_attention": "failed"}, output_has=("All tests passed",)),
    Hostile("forge_files", "forging the report", {"causal_mask": FORGE_FILES},
            expect={"causal_mask": "failed"}, output_has=("FORGE-BLOCKED",), output_lacks=("FORGE-WROTE",),
            needs="files"),
    Hostile("odd_strings", "forging the report", {"softmax": ODD_STRINGS}, expect={"softmax": "error"},
            feedback={"softmax": ("ODD-RAISED \ufffd\ufffd \ufffd\ufffd[31m",)}, output_has=("ODD-OUT \ufffd",)),
    Hostile("big_frame", "forging the report", {"softmax": BIG_FRAME}, expect={"softmax": "error"},
            feedback={"softmax": ("result frame of 32.0 MiB, over the limit of 16.0 MiB",)}),
    Hostile("forge_channel", "forging the report", {"causal_mask": FORGE_CHANNEL},
            expect={"causal_mask": "error"}, feedback={"causal_mask": ("results could not be read",)}),
    # peeking and network
    Hostile("peek", "peeking", {"padding_mask": PEEK}, output_has=("PEEK-BLOCKED", "PEEK-DONE"),
            output_lacks=("PEEK-FOUND",), needs="files"),
    Hostile("fs_walk", "peeking", {"scaled_dot_product_attention": FS_WALK},
            expect={"scaled_dot_product_attention": "failed"}, output_has=("WALK-DONE",),
            output_lacks=("WALK-FOUND",), needs="files"),
    Hostile("network", "network", {"softmax_jacobian": NETWORK}, output_has=("NET-BLOCKED",),
            output_lacks=("NET-CONNECTED",), needs="network"),
    # broken notebooks
    Hostile("invalid_json", "broken notebooks", mangle=_write('{"cells": [{"cell_type": "code", '),
            expect=dict.fromkeys(EXERCISES, "error"), notebook_status="unreadable",
            feedback={"softmax": ("not valid JSON (line 1",)}),
    Hostile("binary_file", "broken notebooks", mangle=_write(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"),
            expect=dict.fromkeys(EXERCISES, "error"), notebook_status="unreadable",
            feedback={"softmax": ("not UTF-8",)}),
    Hostile("json_not_a_notebook", "broken notebooks", mangle=_write("[1, 2, 3]\n"),
            expect=dict.fromkeys(EXERCISES, "error"), notebook_status="unreadable",
            feedback={"softmax": ("not a valid notebook",)}),
    Hostile("nbformat_3", "broken notebooks", mangle=_nbformat3),
    Hostile("missing_notebook", "broken notebooks", filename=None, expect=dict.fromkeys(EXERCISES, "missing"),
            notebook_status="missing", feedback={"softmax": ("not in the submission",)}),
    Hostile("renamed_in_folder", "broken notebooks", filename="01_attention-Copy1.ipynb",
            feedback={"softmax": ("graded 01_attention-Copy1.ipynb",)}),
    Hostile("renamed_file", "broken notebooks", filename="my attention.ipynb", as_file=True),
    Hostile("deleted_cell", "broken notebooks", mangle=_delete_cell, expect={"causal_mask": "missing"},
            feedback={"causal_mask": ("no cell with grade_id",)}),
    Hostile("duplicated_cell", "broken notebooks", mangle=_duplicate_cell, expect={"softmax": "failed"},
            feedback={"softmax": ("the last one counts",)}),
    Hostile("cell_turned_markdown", "broken notebooks", mangle=_to_markdown,
            expect={"scaled_dot_product_attention": "missing"},
            feedback={"scaled_dot_product_attention": ("markdown cell",)}),
    Hostile("stripped_metadata", "broken notebooks", mangle=_strip_metadata,
            feedback={"softmax": ("nbgrader metadata was removed",)}),
    Hostile("syntax_error", "broken notebooks", {"softmax_jacobian": SYNTAX_ERROR},
            expect={"softmax_jacobian": "error"}, feedback={"softmax_jacobian": ("SyntaxError",)}),
    Hostile("import_error", "broken notebooks", {"padding_mask": IMPORT_ERROR},
            expect={"padding_mask": "error"}, feedback={"padding_mask": ("ModuleNotFoundError",)}),
    # one bug costs once: attention that calls an unfinished softmax is graded with the course's
    Hostile("depends_on_stub", "broken notebooks", mangle=_depends_on_stub,
            expect={"softmax": "not_attempted"},
            feedback={"scaled_dot_product_attention": ("course's `softmax` in place of yours",)}),
    Hostile("depends_on_free_cell", "broken notebooks", mangle=_depends_on_free_cell),
    Hostile("depends_on_demo_cell", "broken notebooks", mangle=_depends_on_demo_cell,
            expect={"scaled_dot_product_attention": "error"},
            feedback={"scaled_dot_product_attention": ("NameError", "not the course's demo cells")}),
    # environment drift: correct answers with harmless noise must pass
    Hostile("environment_drift", "environment drift", dict(DRIFT), output_has=("harmless",)),
    # unattempted
    Hostile("unattempted_stub", "unattempted", mangle=_stub("causal_mask"), expect={"causal_mask": "not_attempted"},
            feedback={"causal_mask": ("not attempted",)}),
]
