"""A small on-disk cache of what the course derives from its own files and the installed libraries.

Entries are keyed by a hash of everything they are derived from (the source file's bytes, the
versions of the code that derives them), so a changed course or library misses and recomputes;
nothing is ever invalidated by hand. The cache lives in ``$TFCOURSE_CACHE``, else
``$XDG_CACHE_HOME/tfcourse``, else ``~/.cache/tfcourse``, a folder only the grader's user can
write (mode 0700); learner code never sees it in the bwrap and unshare sandboxes (home folders and
the cache are outside the child's view, docs/grading.md). ``TFCOURSE_CACHE=off`` turns it off.
A cache that cannot be written is skipped silently: it only saves time.

What is kept: the released notebooks (grader/course.py), the reference solution's outcomes on
the hidden and visible cases (grader/grading.py) and notebook 08's real-model oracles
(tfcourse/checks/nb08_real_weights/oracles.py). Tensors are stored with ``torch.save`` and read
back with ``torch.load(weights_only=True)``, which builds tensors and plain containers only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_VAR = "TFCOURSE_CACHE"


def folder() -> Path | None:
    """The cache folder, or None when the cache is off."""
    asked = os.environ.get(ENV_VAR, "")
    if asked.lower() in ("off", "0", "no", "none"):
        return None
    if asked:
        return Path(asked)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfcourse"


def key(*parts: bytes | str) -> str:
    """A hex digest of ``parts`` (each length-prefixed, so no two lists of parts collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def read(kind: str, digest: str) -> bytes | None:
    """The entry ``kind/digest``, or None when there is none (or the cache is off)."""
    root = folder()
    if root is None:
        return None
    try:
        return (root / kind / digest).read_bytes()
    except OSError:
        return None


def write(kind: str, digest: str, data: bytes) -> None:
    """Store ``data`` as ``kind/digest`` atomically (a reader sees the whole entry or none)."""
    root = folder()
    if root is None:
        return
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = root / kind
        target.mkdir(exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=target, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target / digest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def source_digest(*roots: Path) -> str:
    """A digest of every ``.py`` file under ``roots`` (path and bytes), in a stable order: the key
    part that changes whenever the code deriving an entry changes."""
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            data = path.read_bytes()
            name = str(path.relative_to(root)).encode("utf-8")
            h.update(len(name).to_bytes(8, "little") + name + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def file_stamp(path: str | os.PathLike) -> str:
    """A file's resolved path, size and modification time: a rewritten file gets another stamp."""
    stat = Path(path).stat()
    return f"{Path(path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def versions(*modules: str) -> str:
    """The installed versions of ``modules`` (``"?"`` for one that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in modules:
        try:
            found.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name}==?")
    return ";".join(found)


def tensors(kind: str, digest: str, compute: Callable[[], Any]) -> Any:
    """``compute()``'s value (tensors, str, numbers and lists/tuples/dicts of them), kept as
    ``kind/digest``: read back when present and readable, else computed and stored."""
    import io

    import torch

    data = read(kind, digest)
    if data is not None:
        try:
            return torch.load(io.BytesIO(data), weights_only=True)
        except Exception:  # a truncated or foreign entry: recompute and replace it
            pass
    value = compute()
    if folder() is not None:
        buffer = io.BytesIO()
        torch.save(value, buffer)
        write(kind, digest, buffer.getvalue())
    return value
