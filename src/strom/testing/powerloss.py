"""A simulated power cut for the files under one directory (tests only).

Theory of operation
-------------------
The real file system plays the page cache: every write, rename and unlink the code under test
makes happens for real, so it reads its own writes as usual. Beside it, :class:`PowerLossFS`
keeps a model of what a disk would hold after losing power, updated only by ``fsync`` — the one
call through which strom makes anything durable (``os.fdatasync``, ``O_SYNC`` and ``mmap`` are
not used by the log; :func:`strom.durable_file.fsync_dir` fsyncs directories):

* ``fsync`` of a regular file makes its current *content* durable (keyed by inode: the content
  follows the file through renames).
* ``fsync`` of a directory makes its current *entries* durable: which names exist and which inode
  each names. A file created, renamed or unlinked since the directory's last fsync is, after the
  cut, as the last directory fsync saw it — POSIX's rule, stricter than ext4's ordered metadata
  journal, so a bug found here is real on some file system. The root directory itself (and any
  file or directory that existed when the model started) counts as durable.

:meth:`PowerLossFS.cut` then rewrites the tree under the root as the disk would hold it: only
durable names, each with its inode's durable content (empty if never fsynced). With ``torn=True``
(a seeded ``random.Random``), each file that has unflushed changes instead gets one of: exactly
its durable content (whole drop), its live content (the kernel wrote it back on its own), or a
mix of 512-byte sectors of both with a length anywhere between the two and zeros where neither
has data (torn and reordered writes, as real disks do). Directory entries are never torn: a
rename or create is either durable or not.

Every inode the model refers to is pinned by a descriptor the model holds, so the kernel cannot
reuse its number for another file. ``os.fsync`` is replaced while the model is installed
(:meth:`install` / :meth:`uninstall`, or ``with PowerLossFS(root):``) and no real fsync is done
for files under the root, which makes these tests fast. Linux only (``/proc/self/fd``).

After :meth:`cut`, descriptors opened before it point at files that no longer exist under the
root: close (never flush) the objects that hold them and open everything again, as a restarted
process would. The model starts over from the rebuilt tree, which is all durable.

To lose power *inside* an operation (between two steps of a roll, a swap, a checkpoint),
:meth:`crash_after` arms the model: the n-th following fsync under the root takes effect and then
raises :class:`PowerCut` (a ``BaseException``, so no ``except Exception`` in the code under test
swallows it), as does every fsync after it until :meth:`cut`.
"""

from __future__ import annotations

import os
import random
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

_SECTOR = 512

_InodeKey = tuple[int, int]


class PowerCut(BaseException):
    """Raised by fsync once the armed crash point is reached (see :meth:`PowerLossFS.crash_after`)."""


@dataclass
class _Dir:
    entries: dict[str, _InodeKey] = field(default_factory=dict)


class PowerLossFS:
    """Durability model of the tree under ``root`` (see the module docstring)."""

    def __init__(self, root: Path, *, torn: bool = False, rng: random.Random | None = None) -> None:
        self.root = Path(root).resolve()
        self.torn = torn
        self.rng = rng or random.Random(0)
        self._real_fsync: Callable[[Any], None] = os.fsync
        self._installed = False
        self.fsyncs = 0
        self.cuts = 0
        self._crash_in: int | None = None
        self._dead = False
        # fsyncs come from several threads (the coordinators' flusher, the roll flusher, the
        # event loop): one at a time, as the model's dicts are shared
        self._mutex = threading.RLock()
        self._reset()

    # ------------------------------------------------------------------ model

    def _reset(self) -> None:
        self._pins: dict[_InodeKey, int] = {}  # inode -> O_RDONLY descriptor that keeps it alive
        self._is_dir: dict[_InodeKey, bool] = {}
        self._content: dict[_InodeKey, bytes] = {}  # durable content of regular files
        self._dirs: dict[_InodeKey, _Dir] = {}  # durable entries of directories
        self.root.mkdir(parents=True, exist_ok=True)
        self._root_key = self._pin_path(self.root)
        self._snapshot_all(self.root)

    def _pin_path(self, path: Path) -> _InodeKey:
        st = os.lstat(path)
        key = (st.st_dev, st.st_ino)
        if key not in self._pins:
            flags = os.O_RDONLY | (os.O_DIRECTORY if stat.S_ISDIR(st.st_mode) else 0)
            fd = os.open(path, flags)
            st = os.fstat(fd)  # the inode opened (another thread may have renamed over the name)
            key = (st.st_dev, st.st_ino)
            if key in self._pins:
                os.close(fd)
            else:
                self._pins[key] = fd
                self._is_dir[key] = stat.S_ISDIR(st.st_mode)
        return key

    def _pin_fd(self, fd: int, key: _InodeKey, is_dir: bool) -> None:
        if key not in self._pins:
            # reopen through /proc: works for write-only descriptors and unlinked files
            self._pins[key] = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | (os.O_DIRECTORY if is_dir else 0))
            self._is_dir[key] = is_dir

    def _snapshot_all(self, directory: Path) -> None:
        """Everything that exists now is durable (the starting state)."""
        key = self._pin_path(directory)
        entries: dict[str, _InodeKey] = {}
        for entry in os.scandir(directory):
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                entries[entry.name] = self._pin_path(path)
                self._snapshot_all(path)
            elif entry.is_file(follow_symlinks=False):
                k = self._pin_path(path)
                entries[entry.name] = k
                self._content[k] = _read_fd(self._pins[k])
        self._dirs[key] = _Dir(entries)

    def _fsync(self, f: Any) -> None:
        fd: int = f if isinstance(f, int) else f.fileno()
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        is_dir = stat.S_ISDIR(st.st_mode)
        if key not in self._pins and not self._under_root(fd):
            self._real_fsync(fd)
            return
        with self._mutex:
            self._fsync_model(fd, key, is_dir, st)

    def _fsync_model(self, fd: int, key: _InodeKey, is_dir: bool, st: os.stat_result) -> None:
        if self._dead:
            raise PowerCut("the power is off")
        self.fsyncs += 1
        self._pin_fd(fd, key, is_dir)
        if is_dir:
            entries: dict[str, _InodeKey] = {}
            for entry in os.scandir(self._pins[key]):
                if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                    path = os.readlink(f"/proc/self/fd/{self._pins[key]}") + "/" + entry.name
                    try:
                        entries[entry.name] = self._pin_path(Path(path))
                    except FileNotFoundError:
                        # renamed or unlinked by another thread since the scan listed it: a real
                        # directory fsync never fails for that, it records the directory as it is
                        continue
            self._dirs[key] = _Dir(entries)
        elif stat.S_ISREG(st.st_mode):
            self._content[key] = _read_fd(self._pins[key])
        if self._crash_in is not None:
            self._crash_in -= 1
            if self._crash_in <= 0:
                self._dead = True
                raise PowerCut(f"power lost after fsync #{self.fsyncs}")

    def crash_after(self, n: int) -> None:
        """Lose power right after the ``n``-th next fsync under the root (n >= 1)."""
        self._crash_in = max(1, n)

    def disarm(self) -> None:
        """Forget an armed :meth:`crash_after` that has not fired."""
        if not self._dead:
            self._crash_in = None

    @property
    def crashed(self) -> bool:
        return self._dead
    def _under_root(self, fd: int) -> bool:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False
        root = str(self.root)
        return target == root or target.startswith(root + "/")

    # ------------------------------------------------------------------ install

    def install(self) -> PowerLossFS:
        if not self._installed:
            self._real_fsync = os.fsync
            setattr(os, "fsync", self._fsync)  # noqa: B010 (mypy: os.fsync's own signature)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            setattr(os, "fsync", self._real_fsync)  # noqa: B010
            self._installed = False
        for fd in self._pins.values():
            os.close(fd)
        self._pins.clear()

    def __enter__(self) -> PowerLossFS:
        return self.install()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.uninstall()

    # ------------------------------------------------------------------ the cut

    def durable_tree(self) -> dict[str, bytes]:
        """What the disk holds now: relative path -> content (directories end with ``/``)."""
        out: dict[str, bytes] = {}
        self._walk_durable(self._root_key, "", out, torn=False)
        return out

    def _walk_durable(self, key: _InodeKey, prefix: str, out: dict[str, bytes], *, torn: bool) -> None:
        d = self._dirs.get(key)
        for name, child in sorted(d.entries.items()) if d is not None else ():
            rel = prefix + name
            if self._is_dir[child]:
                out[rel + "/"] = b""
                self._walk_durable(child, rel + "/", out, torn=torn)
            else:
                durable = self._content.get(child, b"")
                out[rel] = self._tear(durable, _read_fd(self._pins[child])) if torn else durable

    def _tear(self, durable: bytes, live: bytes) -> bytes:
        if durable == live:
            return durable
        choice = self.rng.randrange(3)
        if choice == 0:
            return durable
        if choice == 1:
            return live
        lo, hi = sorted((len(durable), len(live)))
        length = self.rng.randint(lo, hi)
        out = bytearray(length)
        for start in range(0, length, _SECTOR):
            end = min(start + _SECTOR, length)
            src = live if self.rng.random() < 0.5 else durable
            if start >= len(src):
                src = durable if src is live else live
            chunk = src[start:end]
            out[start:start + len(chunk)] = chunk
        return bytes(out)

    def cut(self) -> dict[str, bytes]:
        """Lose power: rewrite the tree under the root as it is durable on the model's disk (see
        the module docstring), then start a fresh model of it. Returns the tree written."""
        with self._mutex:
            return self._cut()

    def _cut(self) -> dict[str, bytes]:
        tree: dict[str, bytes] = {}
        self._walk_durable(self._root_key, "", tree, torn=self.torn)
        for fd in self._pins.values():
            os.close(fd)
        self._pins.clear()
        _clear_dir(self.root)
        for rel, data in sorted(tree.items()):
            path = self.root / rel
            if rel.endswith("/"):
                path.mkdir()
            else:
                path.write_bytes(data)
        self.cuts += 1
        self._crash_in = None
        self._dead = False
        self._reset()
        return tree


def _read_fd(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    parts = []
    pos = 0
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        parts.append(chunk)
        pos += len(chunk)
    return b"".join(parts)


def _clear_dir(directory: Path) -> None:
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            _clear_dir(Path(entry.path))
            os.rmdir(entry.path)
        else:
            os.unlink(entry.path)
