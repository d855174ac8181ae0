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


def replace_file(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Atomically give ``path`` the content ``data`` (durable when this returns)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)
