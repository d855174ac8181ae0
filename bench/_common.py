"""Shared helpers for the bench scripts: locating ../shared/compat, starting brokers, statistics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
COMPAT = SHARED / "compat"
PERF_SH = COMPAT / "perf.sh"


def compat_home() -> Path:
    """Run ``compat/setup.sh`` (idempotent) and return the cache dir it prints last."""
    setup = ["bash", str(COMPAT / "setup.sh")]
    out = subprocess.run(setup, check=True, capture_output=True, text=True).stdout
    return Path(out.strip().splitlines()[-1])


@dataclass
class Variant:
    """One strom configuration: ``--override`` strings and extra environment."""

    label: str
    overrides: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> Variant:
        """``LABEL[:k=v,k=v,env:NAME=v]`` - e.g. ``pread:strom.fetch.sendfile=false``."""
        label, _, rest = spec.partition(":")
        v = cls(label)
        for item in filter(None, rest.split(",")):
            if item.startswith("env:"):
                k, _, val = item[4:].partition("=")
                v.env[k] = val
            elif "=" in item:
                v.overrides.append(item)
            else:
                raise SystemExit(f"bad variant item {item!r} in {spec!r} (want k=v or env:NAME=v)")
        return v

    def describe(self) -> str:
        parts = [*self.overrides, *(f"env:{k}={v}" for k, v in self.env.items())]
        return ",".join(parts) or "defaults"


def parse_env(items: Sequence[str]) -> dict[str, str]:
    env = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"--broker-env wants NAME=VALUE, got {item!r}")
        env[k] = v
    return env


def cpu_split(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(utime, stime) of a process (or of its thread ``tid``) from /proc, seconds ((0.0, 0.0)
    where unavailable)."""
    stat = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process from /proc (0.0 where unavailable)."""
    return sum(cpu_split(pid))


def create_topic(bootstrap: str, topic: str, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    """Create ``topic`` with confluent-kafka's AdminClient (replication factor 1, topic ``configs``)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for f in admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})]).values():
        f.result(30)


@contextlib.contextmanager
def strom_broker(variant: Variant, keep_log_on_error: bool = True) -> Iterator[Any]:
    """A fresh strom broker in a temporary data dir (deleted afterwards)."""
    from strom.testing.broker_process import BrokerProcess

    tmp = Path(tempfile.mkdtemp(prefix="strom-bench-"))
    broker = BrokerProcess(tmp / "data", overrides=variant.overrides, env=variant.env or None,
                           preload_schemas=True)  # as strom serve's default
    try:
        broker.start()
        yield broker
    except BaseException:
        if keep_log_on_error:
            print(f"--- strom broker log tail ({broker.log_path}):\n{broker.log()[-2000:]}")
        raise
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def median(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in 0..100)."""
    if not sorted_xs:
        return float("nan")
    k = max(0, min(len(sorted_xs) - 1, round(q / 100.0 * len(sorted_xs) + 0.5) - 1))
    return sorted_xs[k]


def fmt(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def await_query(q: Any) -> float:
    """Wall seconds until Spark streaming query ``q`` (started ``availableNow``) terminates; exits
    with its error if it failed."""
    t = time.perf_counter()
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(str(q.exception()))
    return time.perf_counter() - t


async def produce_rows(client: Any, topic: str, partitions: int, rows: int,
                       record: Callable[[int, int], tuple[bytes, bytes, list[Any], int]],
                       chunk: int = 2000, in_flight: int = 16) -> int:
    """Produce ``rows // partitions`` records into each partition of ``topic`` with strom's client,
    in batches of ``chunk`` (``record(partition, i)`` -> (key, value, headers, timestamp ms), ``i``
    counting from 0 in each partition), ``in_flight`` batches at a time; returns how many."""
    from strom.protocol import records as rec  # (bench scripts run with src on the path)

    sends, n = [], 0
    for p in range(partitions):
        for b in range(rows // partitions // chunk):
            off = b * chunk
            batch = rec.build_batch([record(p, off + i) for i in range(chunk)])
            sends.append(client.produce(topic, p, batch))
            n += chunk
            if len(sends) >= in_flight:
                await asyncio.gather(*sends)
                sends = []
    await asyncio.gather(*sends)
    return n
