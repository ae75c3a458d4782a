"""A small on-disk cache of what the grader derives from the course's own files.

Entries are keyed by a hash of everything they are derived from (the source file's bytes, the
versions of the code that derives them), so a changed course or library misses and recomputes;
nothing is ever invalidated by hand. The cache lives in ``$TFCOURSE_CACHE``, else
``$XDG_CACHE_HOME/tfcourse``, else ``~/.cache/tfcourse``, a folder only the grader's user can
write (mode 0700); learner code never sees it in the bwrap and unshare sandboxes (home folders and
the cache are outside the child's view, docs/grading.md). ``TFCOURSE_CACHE=off`` turns it off.
A cache that cannot be written is skipped silently: it only saves time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

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
