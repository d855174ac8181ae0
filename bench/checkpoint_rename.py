"""How long writing a checkpoint file (temporary file, rename; no fsync) takes while another
process fsyncs large files on the same file system (issue 17: why the event loop must not do it).

The writer is a separate process, so no GIL is shared: what is measured is the kernel. Prints
the median, p90, p99 and max of three checkpoint replaces (a log's recovery point, log start and
high watermark) in a row, idle and under the fsync load, side by side.

    PYTHONPATH=src python bench/checkpoint_rename.py [--dir DIR] [--rounds 300] [--mib 64]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strom.durable_file import replace_file

_LOAD = """
import os, sys
d, mib = sys.argv[1], int(sys.argv[2])
buf = b"x" * (1 << 20)
i = 0
while True:
    fd = os.open(os.path.join(d, f"seg{i % 3}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for _ in range(mib):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    i += 1
"""


def measure(d: Path, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "hw-checkpoint"):
            replace_file(d / name, b"0\n1\ntopic 0 12345\n", sync_dir=False, sync=False)
        times.append(time.perf_counter() - t0)
        time.sleep(0.01)
    return sorted(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="a directory on the file system to test (default: temp)")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--mib", type=int, default=64, help="size of each file the load process fsyncs")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="strom-ckpt-bench-", dir=a.dir))
    try:
        for label in ("idle", "fsync load"):
            load = None
            if label != "idle":
                load = subprocess.Popen([sys.executable, "-c", _LOAD, str(d), str(a.mib)])
                time.sleep(1.0)
            try:
                t = measure(d, a.rounds)
            finally:
                if load is not None:
                    load.kill()
                    load.wait()
            n = len(t)
            print(f"{label:>10}: 3 checkpoint replaces p50 {t[n // 2] * 1e3:6.2f} ms  p90 "
                  f"{t[n * 9 // 10] * 1e3:6.2f}  p99 {t[n * 99 // 100] * 1e3:6.2f}  max {t[-1] * 1e3:6.2f}",
                  flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
