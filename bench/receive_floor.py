"""What the kernel alone charges a replica for each byte it receives over loopback TCP and puts
in the page cache, and for each byte it sends from a file (issue 14: how much of a replicated
byte's CPU no broker code can save on this machine).

A sender process pushes GB over a loopback connection; the receiving thread stores it in a file
in one of four ways, side by side in one run (rounds alternate; medians printed):

* ``pwrite``   -- ``recv_into`` a 1 MiB buffer, then ``pwrite`` it (a broker's append: two
  copies, socket to user memory to page cache);
* ``mmap``     -- ``recv_into`` straight into a shared mapping of the (pre-sized) file: one copy,
  but a page fault for every 4 KiB page touched first;
* ``mmap-pop`` -- the same with each 1 MiB range pre-faulted by ``MADV_POPULATE_WRITE``;
* ``splice``   -- socket to pipe to file with ``splice(2)``: the page-cache copy only.

and, as the sending side of a follower's fetch, ``sendfile`` of a file in the page cache to a
receiver that discards what it gets (the sender's CPU is reported); and, as a consumer, the
receiving side of a file sent with ``sendfile`` (``--kinds recv-cached,recv-cold,recv-reread,
recv-willneed``; not in the default set): from the page cache, just dropped from it (read back
from the disk during the send), dropped and read back before the send, or dropped and advised
``POSIX_FADV_WILLNEED`` before each 1 MiB ``sendfile`` (the receiver's CPU is reported).

CPU is the receiving (or sending) thread's own user and system time (``RUSAGE_THREAD``), in
CPU-seconds per GiB. The files go to ``--dir`` (default: a temporary directory under /work, the
disk the brokers use) and are deleted after each round.

    PYTHONPATH=src python bench/receive_floor.py [--gib 1] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import mmap
import os
import resource
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14+
F_SETPIPE_SZ = 1031


def _thread_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime, r.ru_stime


def _pair(send: Callable[[socket.socket], None]) -> tuple[socket.socket, int]:
    """A connection whose other end is a forked child running ``send`` (then exiting)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    port = ls.getsockname()[1]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        ls.close()
        s = socket.create_connection(("127.0.0.1", port))
        try:
            send(s)
        finally:
            s.close()
            os._exit(0)
    conn, _ = ls.accept()
    ls.close()
    return conn, pid


def _push(total: int) -> Callable[[socket.socket], None]:
    def send(s: socket.socket) -> None:
        buf = os.urandom(CHUNK)
        sent = 0
        while sent < total:
            s.sendall(buf)
            sent += CHUNK

    return send


def _recv_full(conn: socket.socket, mv: memoryview) -> int:
    n = 0
    while n < len(mv):
        k = conn.recv_into(mv[n:])
        if k == 0:
            break
        n += k
    return n


def _close(conn: socket.socket, pid: int, fd: int, path: Path) -> None:
    """The peer's connection and process, the file: done with."""
    conn.close()
    os.waitpid(pid, 0)
    os.close(fd)
    path.unlink()


def _rates(
    n: int, seconds: float, before: tuple[float, float], after: tuple[float, float]
) -> tuple[float, float, float]:
    """(MB/s, user CPU-s/GiB, sys CPU-s/GiB) of ``n`` bytes moved."""
    gib = n / (1 << 30)
    return n / seconds / 1e6, (after[0] - before[0]) / gib, (after[1] - before[1]) / gib


def receive(kind: str, total: int, d: Path) -> tuple[float, float, float]:
    """(MB/s, user, sys CPU-s/GiB) of the receiving thread."""
    conn, pid = _pair(_push(total))
    path = d / f"segment-{kind}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    got = 0
    cpu0 = _thread_cpu()
    t0 = time.perf_counter()
    try:
        if kind == "pwrite":
            mv = memoryview(bytearray(CHUNK))
            while got < total:
                n = _recv_full(conn, mv)
                if n == 0:
                    break
                os.pwrite(fd, mv[:n], got)
                got += n
        elif kind in ("mmap", "mmap-pop"):
            os.ftruncate(fd, total)
            m = mmap.mmap(fd, total)
            view = memoryview(m)
            try:
                while got < total:
                    end = min(got + CHUNK, total)
                    if kind == "mmap-pop" and got % CHUNK == 0:
                        m.madvise(MADV_POPULATE_WRITE, got, end - got)
                    k = conn.recv_into(view[got:end])
                    if k == 0:
                        break
                    got += k
            finally:
                view.release()
                m.close()
        elif kind == "splice":
            r, w = os.pipe()
            try:
                fcntl.fcntl(w, F_SETPIPE_SZ, CHUNK)
                while got < total:
                    k = os.splice(conn.fileno(), w, CHUNK)
                    if k == 0:
                        break
                    moved = 0
                    while moved < k:
                        moved += os.splice(r, fd, k - moved, offset_dst=got + moved)
                    got += k
            finally:
                os.close(r)
                os.close(w)
        else:
            raise ValueError(kind)
        cpu1 = _thread_cpu()
        dt = time.perf_counter() - t0
    finally:
        _close(conn, pid, fd, path)
    return _rates(got, dt, cpu0, cpu1)


def send_file(total: int, d: Path) -> tuple[float, float, float]:
    """(MB/s, user, sys CPU-s/GiB) of a thread sendfile-ing a cached file to a discarding peer."""
    path = d / "segment-sendfile"
    with open(path, "wb") as f:
        buf = os.urandom(CHUNK)
        for _ in range(min(total, 256 * CHUNK) // CHUNK):
            f.write(buf)
    size = path.stat().st_size

    def discard(s: socket.socket) -> None:
        buf = bytearray(CHUNK)
        while s.recv_into(buf):
            pass

    conn, pid = _pair(discard)
    fd = os.open(path, os.O_RDONLY)
    os.pread(fd, size, 0)  # in the page cache
    sent = 0
    cpu0 = _thread_cpu()
    t0 = time.perf_counter()
    try:
        while sent < total:
            pos = sent % size
            sent += os.sendfile(conn.fileno(), fd, pos, min(CHUNK, size - pos, total - sent))
        cpu1 = _thread_cpu()
        dt = time.perf_counter() - t0
    finally:
        _close(conn, pid, fd, path)
    return _rates(sent, dt, cpu0, cpu1)


def receive_sent_file(kind: str, total: int, d: Path) -> tuple[float, float, float]:
    """(MB/s, user, sys CPU-s/GiB) of a thread receiving (and discarding) a file its peer sends
    with ``sendfile``: from the page cache (``recv-cached``), or just dropped from it
    (``recv-cold``: ``POSIX_FADV_DONTNEED`` after an fsync, so every byte is read back from the
    disk, as a consumer reading what a broker's page-cache window released)."""
    path = d / f"segment-{kind}"
    with open(path, "wb") as f:
        buf = os.urandom(CHUNK)
        for _ in range(total // CHUNK):
            f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    if kind in ("recv-cold", "recv-reread", "recv-willneed"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if kind in ("recv-cached", "recv-reread"):
        for pos in range(0, total, CHUNK):
            os.pread(fd, CHUNK, pos)  # in the page cache

    def send(s: socket.socket) -> None:
        sent = 0
        while sent < total:
            n = min(CHUNK, total - sent)
            if kind == "recv-willneed":
                os.posix_fadvise(fd, sent, n, os.POSIX_FADV_WILLNEED)
            sent += os.sendfile(s.fileno(), fd, sent, n)

    conn, pid = _pair(send)
    mv = memoryview(bytearray(CHUNK))
    got = 0
    cpu0 = _thread_cpu()
    t0 = time.perf_counter()
    try:
        while got < total:
            n = conn.recv_into(mv)
            if n == 0:
                break
            got += n
        cpu1 = _thread_cpu()
        dt = time.perf_counter() - t0
    finally:
        _close(conn, pid, fd, path)
    return _rates(got, dt, cpu0, cpu1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0, help="GiB per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where the files go (default: under /work)")
    ap.add_argument("--kinds", default="pwrite,mmap,mmap-pop,splice,sendfile")
    a = ap.parse_args()
    base = a.dir or (Path("/work") if Path("/work").is_dir() else Path(tempfile.gettempdir()))
    d = Path(tempfile.mkdtemp(prefix="receive-floor-", dir=base))
    total = int(a.gib * (1 << 30)) // CHUNK * CHUNK
    kinds = a.kinds.split(",")
    res: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
    try:
        for rnd in range(a.rounds):
            for k in kinds:
                if k == "sendfile":
                    r = send_file(total, d)
                elif k.startswith("recv-"):
                    r = receive_sent_file(k, total, d)
                else:
                    r = receive(k, total, d)
                res[k].append(r)
                print(
                    f"round {rnd + 1} {k:9s} {r[0]:7.0f} MB/s  user {r[1]:.3f}  sys {r[2]:.3f} CPU-s/GiB",
                    flush=True,
                )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"== medians of {a.rounds} ({a.gib:g} GiB each; CPU of the receiving, or sending, thread)")
    for k, rows in res.items():
        mbs, u, s = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"{k:9s} {mbs:7.0f} MB/s  user {u:.3f} + sys {s:.3f} = {u + s:.3f} CPU-s/GiB")


if __name__ == "__main__":
    main()
