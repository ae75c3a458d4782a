"""The grader's child process: runs one submission notebook's solution cells and cases.

Started by ``grader.runner`` as ``python -I child.py JOB_DIR`` from a throw-away copy, with the
course's public library (``JOB_DIR/lib``) as the only course code on its path. It never decides a
verdict: it writes what the learner's code returned, as plain tensors (safetensors) and JSON, and
the grading process judges. Protocol, all inside JOB_DIR:

* ``job.json``: setup code, learner cells, the exercises and their encoded calls, the device,
  limits, and which cells/exercises to skip (after an earlier child died on them);
* ``inputs.safetensors``: every tensor the calls use;
* ``progress`` (append-only): ``ready``, ``cell <id>``, ``exercise <name>``, ``done``, so the
  grader knows what was running if this process has to be killed or dies;
* ``results/<exercise>.json`` + ``.safetensors``: the outcomes of one exercise.
"""

import json
import os
import resource
import signal
import sys


def _limit(job: dict) -> None:
    mib = 2**20
    limits = job["limits"]
    if limits.get("memory_mb"):
        size = int(limits["memory_mb"]) * mib
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    files = int(limits.get("file_mb", 256)) * mib
    resource.setrlimit(resource.RLIMIT_FSIZE, (files, files))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails instead of killing us


def main(job_dir: str) -> int:
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as fh:
        job = json.load(fh)
    progress = os.open(os.path.join(job_dir, "progress"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def mark(text: str) -> None:
        os.write(progress, (text + "\n").encode())

    sys.path.insert(0, os.path.join(job_dir, "lib"))
    _limit(job)

    import torch
    from safetensors.torch import load_file, save_file

    from tfcourse.checks._calls import call_from_json, outcome_of_exception, outcome_to_json, run_call

    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = job["device"]
    tensors = load_file(os.path.join(job_dir, "inputs.safetensors"))
    calls = {ex["name"]: [[call_from_json(c, tensors) for c in case] for case in ex["cases"]]
             for ex in job["exercises"]}
    results_dir = os.path.join(job_dir, "results")
    os.makedirs(results_dir, exist_ok=True)
    os.chdir(os.path.join(job_dir, "work"))
    mark("ready")

    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    cell_errors: dict = {}
    try:
        exec(compile(job["setup"], "<course setup>", "exec"), namespace)
    except BaseException as exc:  # the course's own code failed: every exercise errors
        setup_error = outcome_of_exception(exc)
        cell_errors = {c["grade_id"]: setup_error for c in job["cells"]}
    else:
        for cell in job["cells"]:
            if cell["grade_id"] in job["skip_cells"]:
                continue
            mark(f"cell {cell['grade_id']}")
            try:
                exec(compile(cell["source"], f"<cell {cell['grade_id']}>", "exec"), namespace)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt: all are the cell's error
                cell_errors[cell["grade_id"]] = outcome_of_exception(exc)

    for ex in job["exercises"]:
        name = ex["name"]
        if name in job["skip_exercises"]:
            continue
        mark(f"exercise {name}")
        out_tensors: dict = {}
        record: dict = {"cell_error": None, "cases": []}
        if name in cell_errors:
            record["cell_error"] = outcome_to_json(cell_errors[name], out_tensors, "cell")
        else:
            for i, case in enumerate(calls[name]):
                outcomes = []
                for k, call in enumerate(case):
                    torch.manual_seed(job["seed"])
                    outcome = run_call(call, namespace, device)
                    outcomes.append(outcome_to_json(outcome, out_tensors, f"c{i}_{k}"))
                record["cases"].append(outcomes)
        base = os.path.join(results_dir, name)
        save_file(out_tensors, base + ".safetensors.tmp")
        with open(base + ".json.tmp", "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(base + ".safetensors.tmp", base + ".safetensors")
        os.replace(base + ".json.tmp", base + ".json")
    mark("done")
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    os._exit(code)  # don't run learner atexit handlers or wait for their threads
