"""The grader's child process: runs one submission notebook's solution cells and cases.

Started by ``runner`` as ``python -I JOB/child.py JOB CHANNEL_FD`` inside the sandbox
(``views.launch``), with the course's public library (``JOB/lib``) as the only course code on
its path, and ``JOB/linux.py`` (the process tree, for killing what the learner started). It
never decides a verdict: it sends what the learner's code returned, as plain tensors
(safetensors) and JSON, and the grading process judges. Nothing it sends can execute code when
the grading process reads it.

Inputs (read-only): ``JOB/job.json`` (setup code, learner cells, exercises and their encoded
calls, device, seed, limits, cells/exercises to skip after an earlier child died on them, and
the course's code standing in for failed exercises that the graded ones call) and
``JOB/inputs.safetensors`` (every tensor the calls use).

Output: frames on the pipe CHANNEL_FD, each ``<kind: 1 byte><length: 8 hex digits><payload>``:

* ``P``: a progress line, ``ready``, ``cell <grade_id>``, ``exercise <name>``, ``done``, or
  ``restart`` (after running out of memory: the grader starts a fresh child for the exercises
  left, skipping a cell that ran out of memory), so the grader knows what was running if this
  process is killed or dies;
* ``R``: the results of the exercise announced last: ``<name>\n<json length: 8 hex digits>
  <json>`` followed by the safetensors bytes of the returned tensors. The grader keeps it once
  the next progress line arrives.

Learner output (stdout, stderr) goes to the grading process through another pipe, capped there.
"""

import json
import os
import platform
import random
import resource
import signal
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # linux.py lies next to this file
import linux  # noqa: E402

del sys.path[0]


def _limit(job: dict) -> None:
    """rlimits for this process and its children. In a sandbox without capabilities (bwrap,
    unshare) they cannot be raised again; elsewhere (e.g. macOS) some may not apply."""
    mib = 2**20
    limits = job["limits"]
    wanted = [(resource.RLIMIT_CORE, 0)]
    if limits.get("memory_mb") and not job["device"].startswith("cuda"):  # CUDA needs the address space
        wanted.append((resource.RLIMIT_AS, int(limits["memory_mb"]) * mib))
    wanted.append((resource.RLIMIT_FSIZE, int(limits.get("file_mb", 256)) * mib))
    for which, size in wanted:
        try:
            resource.setrlimit(which, (size, size))
        except (ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails instead of killing us


# System calls refused with EPERM before learner code runs (a seccomp filter): the kernel
# keyring calls (add_key, request_key, keyctl; the child runs as the grader's user, whose
# keyrings would otherwise be a channel between submissions and within reach of learner code)
# and the calls that reach into another process (ptrace, process_vm_readv, process_vm_writev,
# pidfd_getfd: the sandbox's init, or bubblewrap's, must stay out of reach). (audit
# architecture, syscall numbers) per machine; on an architecture not listed there is no filter.
REFUSED_CALLS = {"x86_64": (0xC000003E, (248, 249, 250, 101, 310, 311, 438)),
                 "aarch64": (0xC00000B7, (217, 218, 219, 117, 270, 271, 438))}


def _refuse_calls() -> bool:
    """Install a seccomp filter refusing REFUSED_CALLS (and, on x86_64, every x32 call and
    every call of another architecture). Sets no_new_privs, which a filter needs. Returns
    whether the filter is in place (False off Linux or on another architecture)."""
    import ctypes

    if sys.platform != "linux" or platform.machine() not in REFUSED_CALLS:
        return False
    arch, calls = REFUSED_CALLS[platform.machine()]

    class Instr(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Instr))]

    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    n = len(calls)
    code = [(load, 0, 0, 4),  # seccomp_data.arch
            (jeq, 0, n + 3, arch),  # another architecture's call (e.g. i386 on x86_64): refuse
            (load, 0, 0, 0),  # seccomp_data.nr
            (jge, n + 1, 0, 0x40000000 if platform.machine() == "x86_64" else 0xFFFFFFFF)]
    code += [(jeq, n - i, 0, nr) for i, nr in enumerate(calls)]
    code += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]
    program = (Instr * len(code))(*[Instr(*c) for c in code])
    prog = Prog(len(code), program)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


class _Reserve:
    """Address space held back for reporting: released when learner code exhausted the rest."""

    def __init__(self, size: int = 32 * 2**20):
        self.block: bytearray | None = bytearray(size)

    def release(self) -> None:
        self.block = None


def _out_of_memory(outcome) -> bool:
    # the one test of the grader (tfcourse.checks.outcome); the job's library is on the path by now
    from tfcourse.checks.outcome import out_of_memory

    return out_of_memory(outcome.error_type, outcome.error_message)


def _out_of_memory_record(record: dict) -> bool:
    from tfcourse.checks.outcome import out_of_memory

    found = [record.get("run_error")] + [o for case in record["cases"] for o in case]
    return any(isinstance(o, dict) and out_of_memory(str(o.get("error_type", "")), str(o.get("error_message", "")))
               for o in found)


class Channel:
    """The pipe to the grading process (see the module docstring for the frames)."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_inheritable(fd, False)  # programs the learner starts don't get it

    def _send(self, kind: bytes, payload: bytes) -> None:
        data = memoryview(kind + b"%08x" % len(payload) + payload)
        while data:
            data = data[os.write(self.fd, data):]

    def mark(self, text: str) -> None:
        self._send(b"P", text.encode("utf-8"))

    def result(self, name: str, record: dict, tensors: bytes) -> None:
        meta = json.dumps(record).encode("utf-8")
        self._send(b"R", name.encode("utf-8") + b"\n" + b"%08x" % len(meta) + meta + tensors)


def _adopt_orphans() -> None:
    """Linux: become the subreaper of every process the learner's code starts, so that one that
    leaves (double fork, setsid) is still this process's descendant, found and killed at the
    end. (In the bwrap and unshare sandboxes a PID namespace does this anyway.)"""
    if sys.platform == "linux":
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            pass


def _kill_descendants() -> None:
    """Kill every process below this one (Linux /proc); best effort."""
    for pid in linux.process_tree(os.getpid())[1:]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _numerics_reset(torch, seed: int):
    """A function restoring the numeric state every call starts from, whatever the learner's cells
    changed (threads, TF32, default dtype/device, grad mode, seeds, warning filters): verdicts
    must depend on the returned values only. The functions it calls are bound now, so this must
    run before any learner code does."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    set_threads, set_dtype, set_grad = torch.set_num_threads, torch.set_default_dtype, torch.set_grad_enabled
    set_precision, manual_seed = torch.set_float32_matmul_precision, torch.manual_seed
    set_default_device = getattr(torch, "set_default_device", None)
    # torch.use_deterministic_algorithms imports torch._inductor (about 800 modules, 3 s) on its
    # first call: called only when the learner's code turned the flag on
    deterministic, is_deterministic = torch.use_deterministic_algorithms, torch.are_deterministic_algorithms_enabled
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled
    filters = list(warnings.filters)

    def reset_numerics() -> None:
        try:
            set_threads(1)
            set_dtype(torch.float32)
            set_grad(True)
            set_precision("highest")
            matmul.allow_tf32 = False
            cudnn.allow_tf32 = False
            if is_deterministic() or warn_only():
                deterministic(False)
            if set_default_device is not None:
                set_default_device(None)
            warnings.filters[:] = filters
            random.seed(seed)
            if "numpy" in sys.modules:
                sys.modules["numpy"].random.seed(seed)
            manual_seed(seed)
        except Exception:  # noqa: BLE001 - a learner who broke these gets what they broke
            pass

    return reset_numerics


class _Run:
    """What one child does once ready: the course's setup, the learner's cells in notebook order,
    then the exercises' calls, each exercise's results sent as soon as it is graded.

    An exercise whose check cell's place is known (a cell's "then") is graded right after that
    cell, as Run All checks it, with the names as they are at that point; the others after the
    last cell, as their own cell defined them. ``run_call``, ``save``, ``outcome_of_exception``
    and ``outcome_to_json`` are the functions main imported once the job's library was on the
    path."""

    def __init__(self, job: dict, channel: Channel, calls: dict, reset_numerics, reserve: _Reserve, *,
                 device: str, run_call, save, outcome_of_exception, outcome_to_json):
        self.job, self.channel, self.calls, self.device = job, channel, calls, device
        self.reset_numerics, self.reserve = reset_numerics, reserve
        self.run_call, self.save = run_call, save
        self.outcome_of_exception, self.outcome_to_json = outcome_of_exception, outcome_to_json
        self.namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        self.cell_errors: dict = {}
        # What each exercise's own cell defined: a later cell may reuse the name for a helper.
        self.own: dict = {}
        self.exercises = {ex["name"]: ex for ex in job["exercises"] if ex["name"] not in job["skip_exercises"]}
        self.stand_ins = job.get("stand_ins") or {}

    def run(self) -> int:
        """Everything to the end (``done``), or until a fresh child must go on (``restart``)."""
        if self._setup() and not self._cells():
            return self._restart()
        for name in list(self.exercises):
            if not self.grade(name, {**self.namespace, **self.own}):
                return self._restart()
        self.channel.mark("done")
        return 0

    def _restart(self) -> int:
        self.channel.mark("restart")
        return 0

    def _setup(self) -> bool:
        """The course's setup cell; False when it failed (every exercise then errors)."""
        try:
            exec(compile(self.job["setup"], "<course setup>", "exec"), self.namespace)
        except BaseException as exc:  # the course's own code failed: every exercise errors
            setup_error = self.outcome_of_exception(exc)
            self.cell_errors = {c["grade_id"]: setup_error for c in self.job["cells"]}
            return False
        return True

    def _cells(self) -> bool:
        """Each cell not skipped, then the exercises graded right after it; False when a fresh
        child must go on."""
        for cell in self.job["cells"]:
            if cell["grade_id"] not in self.job["skip_cells"] and not self._cell(cell):
                return False
            for name in cell.get("then", []):
                if name in self.exercises and not self.grade(name, dict(self.namespace)):
                    return False
        return True

    def _cell(self, cell: dict) -> bool:
        """Run one cell; its error is kept for its exercise. False when it ran out of memory (that
        is reported, and a fresh child, which skips this cell, grades the others)."""
        self.channel.mark(f"cell {cell['grade_id']}")
        self.reset_numerics()
        try:
            exec(compile(cell["source"], f"<cell {cell['grade_id']}>", "exec"), self.namespace)
            if cell["grade_id"] in self.namespace:
                self.own[cell["grade_id"]] = self.namespace[cell["grade_id"]]
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: all are the cell's error
            if isinstance(exc, MemoryError):
                self.reserve.release()
                self.namespace.clear()  # what the cell allocated may still be referenced
            self.cell_errors[cell["grade_id"]] = error = self.outcome_of_exception(exc)
            if _out_of_memory(error):
                # report it, and let a fresh child (which skips this cell) grade the others
                name = cell["grade_id"]
                self.channel.mark(f"exercise {name}")
                self.channel.result(name, {"cell_error": self.outcome_to_json(error, {}, "cell"),
                                           "run_error": None, "cases": []}, self.save({}))
                return False
        return True

    def _use_stand_ins(self) -> None:
        """The course's own code for exercises the learner's versions of which failed, so that an
        exercise that calls them is graded on its own (one bug costs points once). The grading
        process sends them only in a run of their own that grades no exercise stood in."""
        course_view = dict(self.namespace)  # setup names and the learner's other objects
        try:
            for name, source in self.stand_ins.items():
                exec(compile(source, f"<course {name}>", "exec"), course_view)
        except BaseException as exc:  # the course's own code failed: every exercise errors
            setup_error = self.outcome_of_exception(exc)
            self.cell_errors.update({c["grade_id"]: setup_error for c in self.job["cells"]})
        else:
            for name in self.stand_ins:
                self.namespace[name] = self.own[name] = course_view[name]

    def grade(self, name: str, view: dict) -> bool:
        """Run one exercise's calls and send its results; False when a fresh child must go on."""
        self.exercises.pop(name)
        if self.stand_ins:
            self._use_stand_ins()
            view = {**view, **{n: self.namespace[n] for n in self.stand_ins if n in self.namespace}}
        self.channel.mark(f"exercise {name}")
        out_tensors: dict = {}
        record: dict = {"cell_error": None, "run_error": None, "cases": []}
        try:
            if name in self.cell_errors:
                record["cell_error"] = self.outcome_to_json(self.cell_errors[name], out_tensors, "cell")
            else:
                for i, case in enumerate(self.calls[name]):
                    outcomes = []
                    for k, call in enumerate(case):
                        self.reset_numerics()
                        outcome = self.run_call(call, view, self.device)
                        outcomes.append(self.outcome_to_json(outcome, out_tensors, f"c{i}_{k}"))
                    record["cases"].append(outcomes)
            data = self.save(out_tensors)
        except BaseException as exc:  # e.g. MemoryError while keeping a huge answer
            self.reserve.release()
            out_tensors.clear()
            record = {"cell_error": None,
                      "run_error": self.outcome_to_json(self.outcome_of_exception(exc), {}, "e"), "cases": []}
            data = self.save({})
        self.channel.result(name, record, data)
        # memory the learner's code kept must not starve the others
        return not (_out_of_memory_record(record) and self.exercises)


def main(job_dir: str, fd: int) -> int:
    channel = Channel(fd)
    _adopt_orphans()
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as fh:
        job = json.load(fh)
    sys.path.insert(0, os.path.join(job_dir, "lib"))
    _limit(job)
    if not _refuse_calls() and sys.platform == "linux" and platform.machine() in REFUSED_CALLS:
        print("grader: warning: the seccomp filter could not be installed; keyring and ptrace "
              "calls are not refused", file=sys.stderr, flush=True)

    import torch
    from safetensors.torch import load_file, save

    from tfcourse.checks.call import run_call
    from tfcourse.checks.outcome import outcome_of_exception
    from tfcourse.checks.wire import call_from_json, outcome_to_json

    device, seed = job["device"], int(job["seed"])
    tensors = load_file(os.path.join(job_dir, "inputs.safetensors"))
    calls = {ex["name"]: [[call_from_json(c, tensors) for c in case] for case in ex["cases"]]
             for ex in job["exercises"]}

    reset_numerics = _numerics_reset(torch, seed)  # before any learner code runs
    reset_numerics()
    reserve = _Reserve()
    os.chdir(os.environ.get("HOME", "."))
    channel.mark("ready")
    return _Run(job, channel, calls, reset_numerics, reserve, device=device, run_call=run_call, save=save,
                outcome_of_exception=outcome_of_exception, outcome_to_json=outcome_to_json).run()


if __name__ == "__main__":
    code = main(sys.argv[1], int(sys.argv[2]))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - learner code may have replaced or closed them
        pass
    _kill_descendants()  # nothing the learner started outlives the child
    os._exit(code)  # don't run learner atexit handlers or wait for their threads
