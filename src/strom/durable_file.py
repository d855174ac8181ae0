"""Small files replaced atomically: checkpoints, the topic registry, dynamic configs, id blocks.

:func:`replace_file` writes a temporary sibling, fsyncs it, renames it over the target and (by
default) fsyncs the directory, so after a crash the file holds either the old or the new
content, never a mix. Error contract: ``OSError`` from the file system, unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(
    path: Path, data: bytes, *, sync_dir: bool = True, mode: int | None = None, sync: bool = True
) -> None:
    """Atomically give ``path`` the content ``data`` (durable when this returns, unless
    ``sync=False``: then the caller syncs the file system before relying on it).

    ``mode`` (e.g. 0o600 for secrets) is given to the temporary file when it is created, and
    set again with fchmod (the umask, or a leftover tmp file, could otherwise widen it), so the
    file never exists with wider permissions, not even for a moment. Without it: 0o644 after
    the umask."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir and sync:
        fsync_dir(path.parent)
