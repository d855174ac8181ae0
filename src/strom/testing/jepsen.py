"""A Jepsen-style workload and checker for a replicated topic, with real Kafka clients.

Theory of operation
-------------------
* **Workload** (:class:`Workload`): while faults are injected, ``producers`` idempotent
  ``acks=all`` confluent-kafka producers (librdkafka) each send unique values ``p<i>-<seq>``
  round-robin over the topic's partitions, and record every acknowledgement as
  ``(partition, offset, value)`` (and every definite failure); ``consumers`` members of one
  consumer group read, record every ``(partition, offset, value)`` they observed, and commit
  their positions synchronously every ``commit_interval`` seconds; a monitor reads the group's
  committed offsets (OffsetFetch, as a non-member) every ``monitor_interval`` seconds, and
  :meth:`Workload.read_final_committed` reads them once more at the end. All of it lands in a
  :class:`History`.
* **Final read** (:func:`final_read`): after the faults healed, one consumer assigned every
  partition from the beginning reads up to each partition's high watermark.
* **Checker** (:func:`check`), in Jepsen's vocabulary:
  - *lost*: acknowledged, absent from the final read;
  - *misplaced*: acknowledged at an offset that holds something else in the final read;
  - *duplicated*: a value at two offsets of the final log (idempotence promises once);
  - *unseen*: acknowledged, never read by the consumer group (liveness: once the faults
    healed, the group reads everything within the drain time);
  - *phantom*: a consumer observed ``(partition, offset, value)`` that is not at that offset in the
    final log (a read of data that was never committed, later truncated away);
  - *unexpected*: a final-log value no producer ever sent;
  - *reordered*: one producer's acknowledged values in one partition at offsets out of send order;
  - *non-monotonic*: final-read offsets of a partition not strictly increasing;
  - *offset regressions*: a commit of a partition acknowledged after another one of a higher
    offset (the group's committed offset moved backwards);
  - *lost commits*: the group's committed offset read once the cluster healed is below the
    highest commit acknowledged;
  - *stale committed-offset reads* (reported, not an error): the monitor's OffsetFetch answered
    an offset below a commit acknowledged before it asked — a deposed coordinator answering
    from its state before it learns it was deposed (a Kafka coordinator does the same).
  Records sent but not acknowledged (failed or unanswered) may or may not be in the log
  (*indeterminate*, counted, never an error).

* **Transactions** (:class:`TxnWorkload`, :func:`check_txn`; see the comment above
  :class:`TxnHistory`): transactional producers writing to several partitions per transaction,
  some aborted on purpose, and read_committed / read_uncommitted readers; the checker looks for
  aborted reads, torn transactions (some records visible, not all), committed records lost, and
  counts the uncertain transactions (commit never confirmed: committed or not, whole either way).

Thread-based (librdkafka's callbacks run in the polling thread); the clients are confluent-kafka's,
imported lazily so the module imports without it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CheckResult", "History", "TxnCheckResult", "TxnHistory", "TxnWorkload", "Workload", "check",
    "check_txn", "final_read", "final_txn_read",
]

Record = tuple[int, int, str]  # (partition, offset, value)


@dataclass
class History:
    sent: set[str] = field(default_factory=set)
    acked: list[Record] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (value, error)
    observed: list[tuple[int, Record]] = field(default_factory=list)  # (consumer, record)
    commits: list[tuple[float, int, int, str]] = field(default_factory=list)  # acked: (time, p, offset, by)
    offset_reads: list[tuple[float, int, int]] = field(default_factory=list)  # monitor: (sent at, p, offset)
    final_committed: dict[int, int] = field(default_factory=dict)  # read once the cluster healed
    errors: list[str] = field(default_factory=list)  # client-level errors (for the report)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note_error(self, who: str, err: object) -> None:
        with self.lock:
            if len(self.errors) < 2000:
                self.errors.append(f"{time.monotonic():.1f} {who}: {err}")


@dataclass
class CheckResult:
    acked: int = 0
    read: int = 0
    final: int = 0
    lost: list[Record] = field(default_factory=list)
    misplaced: list[tuple[Record, str | None]] = field(default_factory=list)
    duplicated: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    phantom: list[tuple[Record, str | None]] = field(default_factory=list)
    unexpected: list[Record] = field(default_factory=list)
    reordered: list[tuple[str, str]] = field(default_factory=list)
    non_monotonic: list[tuple[int, int, int]] = field(default_factory=list)
    regressions: list[tuple[int, int, int, str]] = field(default_factory=list)
    lost_commits: list[tuple[int, int, int]] = field(default_factory=list)  # (p, acked, final)
    stale_offset_reads: list[tuple[int, int, int, str]] = field(default_factory=list)
    indeterminate: int = 0
    acked_without_offset: int = 0  # acknowledged, offset unknown to the client (not checked for it)
    unseen: list[Record] = field(default_factory=list)  # acknowledged, never read by the group
    observed: int = 0
    commits: int = 0
    offset_reads: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.misplaced or self.duplicated or self.phantom or self.unexpected
                    or self.reordered or self.non_monotonic or self.regressions or self.lost_commits
                    or self.unseen)

    def summary(self) -> str:
        return (
            f"acked {self.acked}, read {self.read}, lost {len(self.lost)}, "
            f"duplicated {len(self.duplicated)}, phantom {len(self.phantom)}, "
            f"misplaced {len(self.misplaced)}, unexpected {len(self.unexpected)}, "
            f"reordered {len(self.reordered)}, non-monotonic {len(self.non_monotonic)}, "
            f"offset regressions {len(self.regressions)}, lost commits {len(self.lost_commits)}, "
            f"unseen by the group {len(self.unseen)} "
            f"(final log {self.final}, indeterminate {self.indeterminate}, "
            f"acknowledged without an offset {self.acked_without_offset}, "
            f"consumer observations {self.observed}, acknowledged commits {self.commits}, "
            f"stale committed-offset reads {len(self.stale_offset_reads)} of {self.offset_reads})"
        )

    def details(self, limit: int = 10) -> str:
        out = [self.summary()]
        for name in ("lost", "misplaced", "duplicated", "phantom", "unexpected", "reordered",
                     "non_monotonic", "regressions", "lost_commits", "unseen", "stale_offset_reads"):
            v = getattr(self, name)
            if v:
                items = list(v.items()) if isinstance(v, dict) else list(v)
                out.append(f"  {name} ({len(items)}): {items[:limit]}")
        return "\n".join(out)


def check(h: History, final: dict[int, list[tuple[int, str]]]) -> CheckResult:
    """The anomalies of ``h`` against the final log ``final`` (partition -> [(offset, value)])."""
    r = CheckResult(acked=len(h.acked), observed=len(h.observed), commits=len(h.commits),
                    offset_reads=len(h.offset_reads))
    at: dict[tuple[int, int], str] = {}
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, recs in final.items():
        last = -1
        for o, v in recs:
            if o <= last:
                r.non_monotonic.append((p, last, o))
            last = o
            at[(p, o)] = v
            where[v].append((p, o))
            r.final += 1
    r.duplicated = {v: locs for v, locs in where.items() if len(locs) > 1}
    acked_values = set()
    for p, o, v in h.acked:
        acked_values.add(v)
        if v not in where:
            r.lost.append((p, o, v))
            continue
        r.read += 1
        if o < 0:
            r.acked_without_offset += 1
            continue
        if at.get((p, o)) != v:
            r.misplaced.append(((p, o, v), at.get((p, o))))
    r.indeterminate = sum(1 for v in where if v not in acked_values and v in h.sent)
    r.unexpected = [(p, o, v) for (p, o), v in at.items() if v not in h.sent]
    seen_values = {rec[2] for _c, rec in h.observed}
    r.unseen = [(p, o, v) for p, o, v in h.acked if v not in seen_values]
    seen: set[Record] = set()
    for _c, rec in h.observed:
        if rec in seen:
            continue
        seen.add(rec)
        p, o, v = rec
        if at.get((p, o)) != v:
            r.phantom.append((rec, at.get((p, o))))
    # one producer's acknowledged values in a partition: offsets in send order
    by_prod: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for p, o, v in h.acked:
        if o < 0:
            continue
        prod, seq = v.rsplit("-", 1)
        by_prod[(prod, p)].append((int(seq), o))
    for (_prod, _p), pairs in by_prod.items():
        pairs.sort()
        for (s1, o1), (s2, o2) in itertools.pairwise(pairs):
            if o2 <= o1:
                r.reordered.append((f"{_prod}-{s1}@{o1}", f"{_prod}-{s2}@{o2}"))
    # acknowledged commits: never backwards (in the order they were acknowledged), all kept
    best: dict[int, tuple[int, str]] = {}
    acked_by_time: list[tuple[float, int, int]] = []
    for t, p, o, by in sorted(h.commits, key=lambda c: c[0]):
        if o < 0:
            continue
        acked_by_time.append((t, p, o))
        prev = best.get(p)
        if prev is not None and o < prev[0]:
            r.regressions.append((p, prev[0], o, f"{prev[1]} -> {by} at {t:.1f}"))
        if prev is None or o >= prev[0]:
            best[p] = (o, f"{by} at {t:.1f}")
    for p, (o, _by) in best.items():
        final_o = h.final_committed.get(p, -1)
        if final_o < o:
            r.lost_commits.append((p, o, final_o))
    # reads of the committed offsets (OffsetFetch) below a commit acknowledged before the read
    # was sent: stale reads (a deposed coordinator answering from its state), reported
    i = 0
    upto: dict[int, tuple[int, float]] = {}
    for t, p, o in sorted(h.offset_reads):
        while i < len(acked_by_time) and acked_by_time[i][0] < t:
            _t, cp, co = acked_by_time[i]
            if co > upto.get(cp, (-1, 0.0))[0]:
                upto[cp] = (co, _t)
            i += 1
        if o < upto.get(p, (-1, 0.0))[0]:
            r.stale_offset_reads.append((p, upto[p][0], o, f"acked at {upto[p][1]:.1f}, read at {t:.1f}"))
    return r


class Workload:
    """Producers, a consumer group and a committed-offset monitor on ``topic`` (see the module
    docstring); :meth:`start`, fault injection by the caller, :meth:`stop`."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        producers: int = 2,
        consumers: int = 2,
        rate: float = 100.0,  # records per second per producer
        commit_interval: float = 0.5,
        monitor_interval: float = 0.5,
        message_timeout_ms: int = 120_000,
        group: str | None = None,
    ) -> None:
        import confluent_kafka  # noqa: F401  (fail early without it)

        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.n_producers = producers
        self.n_consumers = consumers
        self.rate = rate
        self.commit_interval = commit_interval
        self.monitor_interval = monitor_interval
        self.message_timeout_ms = message_timeout_ms
        self.group = group or f"jepsen-{uuid.uuid4().hex[:8]}"
        self.history = History()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads: list[threading.Thread] = []
        self.unanswered = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Workload:
        for i in range(self.n_consumers):
            self._spawn(f"consumer-{i}", functools.partial(self._consume, i))
        self._spawn("monitor", self._monitor)
        for i in range(self.n_producers):
            self._spawn(f"producer-{i}", functools.partial(self._produce, i))
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except Exception as e:  # the history says what broke; the checker decides
                self.history.note_error(name, f"thread died: {e!r}")

        t = threading.Thread(target=run, name=f"jepsen-{name}", daemon=True)
        self._threads.append(t)
        t.start()

    def stop_producers(self, timeout: float = 150.0) -> None:
        """Stop sending and wait until every sent record is answered (or ``timeout``)."""
        self._stop_producing.set()
        for t in self._threads:
            if t.name.startswith("jepsen-producer"):
                t.join(timeout)

    def stop(self, drain: float = 30.0, timeout: float = 150.0) -> None:
        """Stop the producers (every record answered), let the consumers read until they saw
        every acknowledged record (at most ``drain`` seconds), then stop them and the monitor."""
        self.stop_producers(timeout)
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            with self.history.lock:
                seen = {rec[2] for _c, rec in self.history.observed}
                if all(v in seen for _p, _o, v in self.history.acked):
                    break
            time.sleep(0.2)
        time.sleep(0.5)  # a last commit round
        self._stop_consuming.set()
        for t in self._threads:
            t.join(30)

    @property
    def acked(self) -> int:
        return len(self.history.acked)

    def wait_acked(self, more: int, timeout: float = 60.0) -> bool:
        """Wait until ``more`` records beyond the current count are acknowledged."""
        target = self.acked + more
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.acked >= target:
                return True
            time.sleep(0.1)
        return False

    # ------------------------------------------------------------------ threads
    def _produce(self, i: int) -> None:
        import confluent_kafka

        h = self.history
        who = f"producer-{i}"
        p = confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 10,
            "message.timeout.ms": self.message_timeout_ms,
            "topic.metadata.refresh.interval.ms": 1000,
            "retry.backoff.ms": 100,
            "error_cb": lambda err: h.note_error(who, err),
            "log_level": 0,  # errors reach error_cb (the history), not stderr
        })

        def delivered(err: Any, msg: Any) -> None:
            v = msg.value().decode()
            with h.lock:
                if err is not None:
                    h.failed.append((v, str(err)))
                else:  # an offset librdkafka does not know (-1: None here) is kept as -1
                    off = msg.offset()
                    h.acked.append((msg.partition(), off if off is not None else -1, v))

        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop_producing.is_set():
            v = f"p{i}-{seq}"
            try:
                p.produce(self.topic, value=v.encode(), partition=seq % self.partitions,
                          on_delivery=delivered)
            except BufferError:
                p.poll(0.05)
                continue
            except Exception as e:  # a fatal idempotence error: the producer is unusable
                h.note_error(who, f"produce: {e!r}")
                break
            with h.lock:
                h.sent.add(v)
            seq += 1
            next_at += interval
            p.poll(max(0.0, next_at - time.monotonic()))
        left = p.flush(self.message_timeout_ms / 1000 + 10)
        self.unanswered += left

    def _consume(self, i: int) -> None:
        import confluent_kafka

        h = self.history
        who = f"consumer-{i}"
        c = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": who,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: h.note_error(who, err),
            "log_level": 0,  # errors reach error_cb (the history), not stderr
        })
        c.subscribe([self.topic])
        last_commit = time.monotonic()
        try:
            while not self._stop_consuming.is_set():
                msgs = c.consume(200, 0.2)
                got = []
                for m in msgs:
                    if m.error():
                        h.note_error(who, m.error())
                        continue
                    got.append((i, _record(m)))
                if got:
                    with h.lock:
                        h.observed.extend(got)
                now = time.monotonic()
                if now - last_commit >= self.commit_interval:
                    last_commit = now
                    self._commit(c, who)
            self._commit(c, who)
        finally:
            c.close()

    def _commit(self, c: Any, who: str) -> None:
        import confluent_kafka

        h = self.history
        try:
            done = c.commit(asynchronous=False)
        except confluent_kafka.KafkaException as e:
            if e.args and getattr(e.args[0], "code", lambda: None)() == confluent_kafka.KafkaError._NO_OFFSET:
                return
            h.note_error(who, f"commit: {e}")
            return
        t = time.monotonic()
        with h.lock:
            for tp in done or ():
                if tp.error is None and tp.offset >= 0:
                    h.commits.append((t, tp.partition, tp.offset, who))

    def _monitor(self) -> None:
        import confluent_kafka

        h = self.history
        c = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: h.note_error("monitor", err),
            "log_level": 0,
        })
        tps = [confluent_kafka.TopicPartition(self.topic, p) for p in range(self.partitions)]
        try:
            while not self._stop_consuming.wait(self.monitor_interval):
                t = time.monotonic()
                try:
                    got = c.committed(tps, timeout=5)
                except confluent_kafka.KafkaException as e:
                    h.note_error("monitor", f"committed: {e}")
                    continue
                with h.lock:
                    for tp in got:
                        if tp.error is None and tp.offset >= 0:
                            h.offset_reads.append((t, tp.partition, tp.offset))
        finally:
            c.close()

    def read_final_committed(self, timeout: float = 60.0) -> dict[int, int]:
        """The group's committed offsets once the cluster healed (into the history)."""
        import confluent_kafka

        c = confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                      "enable.auto.commit": False, "log_level": 0})
        tps = [confluent_kafka.TopicPartition(self.topic, p) for p in range(self.partitions)]
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    got = c.committed(tps, timeout=10)
                    if all(tp.error is None for tp in got):
                        break
                except confluent_kafka.KafkaException:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("the group's committed offsets could not be read")
                time.sleep(0.5)
        finally:
            c.close()
        self.history.final_committed = {tp.partition: tp.offset for tp in got}
        return self.history.final_committed


def _record(m: Any) -> Record:
    """A consumed message as (partition, offset, value)."""
    value = m.value()
    return int(m.partition()), int(m.offset()), value.decode() if value is not None else ""


def final_read(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0
               ) -> dict[int, list[tuple[int, str]]]:
    """Every record of ``topic`` from the start up to each partition's high watermark, read by
    one consumer that assigns the partitions itself (no group)."""
    import confluent_kafka

    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"final-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    try:
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        for p in range(partitions):
            while True:
                try:
                    _low, high = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=5)
                    ends[p] = high
                    break
                except confluent_kafka.KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        c.assign([
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ])
        pos = {p: 0 for p in range(partitions)}
        while any(pos[p] < ends[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"final read incomplete: positions {pos}, ends {ends}")
            for m in c.consume(500, 0.5):
                if m.error():
                    continue
                p, o, v = _record(m)
                if o >= ends[p]:
                    continue
                out[p].append((o, v))
                pos[p] = o + 1
    finally:
        c.close()
    return out


# ====================================================================================== transactions
#
# Transactional workload and checker. Beside the idempotent producers, ``producers`` transactional
# confluent-kafka producers (``transactional.id``) each run transactions of ``min_records`` to
# ``max_records`` records spread over at least two partitions of their own topic, and abort a share
# ``abort_ratio`` of them on purpose. Each record's value names its transaction and its place in
# it (``x<producer>-<n>:<j>/<k>``). Failures are handled as an application following librdkafka's
# transactional API would: a retriable error of commit_transaction retries the commit, an abortable
# one aborts the transaction (abort_transaction, itself retried while retriable), a fatal one (e.g.
# the producer fenced) drops the producer and makes a new one with the same ``transactional.id``
# (its init_transactions completes or aborts what the old one left). Each transaction ends up:
#   * committed: commit_transaction returned;
#   * aborted: abort_transaction returned, or it failed before its commit was ever asked for (the
#     coordinator can only abort it: on the fenced producer's successor's init_transactions or on
#     its timeout);
#   * uncertain: the commit was asked for and never confirmed (a fatal error or out of retries): it
#     may have been committed or not, but must be whole either way.
# A read_committed and a read_uncommitted consumer, each assigned every partition from the start,
# read throughout and until they reached the end after the producers stopped; once the faults
# healed, a final read of each isolation level takes every partition from the start to its end.
# :func:`check_txn` then looks for
#   * aborted reads: a record of an aborted transaction seen by a read_committed reader;
#   * torn transactions: a committed or uncertain transaction some but not all of whose records a
#     read_committed reader saw (the live one once it reached the end, or the final read);
#   * lost: a record of a committed transaction absent from the final read_committed read;
#   * duplicated: a value at two offsets of the final read_uncommitted log (the transactional
#     producer is idempotent);
#   * phantom: a live read (either level) of a (partition, offset, value) not at that offset in
#     the final read_uncommitted log;
#   * unexpected: a value no transactional producer sent;
#   * reordered: two records of one transaction in one partition at offsets out of send order;
# and counts (not errors) the records of aborted transactions that read_uncommitted readers saw
# (Kafka lets them) and how the uncertain transactions ended.

TxnRead = list[tuple[int, int, str]]  # [(partition, offset, value)]


@dataclass
class TxnHistory:
    txns: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # txn -> [(partition, value)]
    outcome: dict[str, str] = field(default_factory=dict)  # txn -> committed | aborted | uncertain
    aborted_on_purpose: int = 0
    aborted_after_error: int = 0
    commit_retries: int = 0
    abort_retries: int = 0
    fatal: int = 0  # producers dropped after a fatal error (a new one took over)
    errors: list[str] = field(default_factory=list)
    read_committed: TxnRead = field(default_factory=list)  # live reads
    read_uncommitted: TxnRead = field(default_factory=list)
    reached_end: set[str] = field(default_factory=set)  # live readers (levels) that read to the end
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note_error(self, who: str, err: object) -> None:
        with self.lock:
            if len(self.errors) < 2000:
                self.errors.append(f"{time.monotonic():.1f} {who}: {err}")


@dataclass
class TxnCheckResult:
    committed: int = 0
    aborted: int = 0
    uncertain: int = 0
    uncertain_committed: int = 0  # uncertain, found whole in the final read_committed log
    uncertain_absent: int = 0
    committed_records: int = 0
    final_committed_records: int = 0  # records in the final read_committed read
    final_uncommitted_records: int = 0
    aborted_seen_uncommitted: int = 0  # records of aborted transactions read with read_uncommitted
    live_committed_reads: int = 0
    live_uncommitted_reads: int = 0
    aborted_on_purpose: int = 0
    aborted_after_error: int = 0
    commit_retries: int = 0
    fatal: int = 0
    aborted_reads: list[tuple[str, Record]] = field(default_factory=list)  # (reader, record)
    torn: list[tuple[str, str, int, int]] = field(default_factory=list)  # (reader, txn, seen, of)
    lost: list[tuple[str, int, str]] = field(default_factory=list)  # (txn, partition, value)
    duplicated: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    phantom: list[tuple[str, Record, str | None]] = field(default_factory=list)
    unexpected: list[tuple[str, Record]] = field(default_factory=list)
    reordered: list[tuple[str, str, str]] = field(default_factory=list)
    short: list[str] = field(default_factory=list)  # live readers that never reached the end

    @property
    def ok(self) -> bool:
        return not (self.aborted_reads or self.torn or self.lost or self.duplicated or self.phantom
                    or self.unexpected or self.reordered or self.short)

    def summary(self) -> str:
        return (
            f"transactions: committed {self.committed} ({self.committed_records} records), "
            f"aborted {self.aborted} ({self.aborted_on_purpose} on purpose, "
            f"{self.aborted_after_error} after an error), uncertain {self.uncertain} "
            f"(found committed {self.uncertain_committed}, absent {self.uncertain_absent}); "
            f"aborted reads {len(self.aborted_reads)}, torn {len(self.torn)}, lost {len(self.lost)}, "
            f"duplicated {len(self.duplicated)}, phantom {len(self.phantom)}, "
            f"unexpected {len(self.unexpected)}, reordered {len(self.reordered)}, "
            f"live readers short of the end {len(self.short)} "
            f"(final log read_committed {self.final_committed_records} / read_uncommitted "
            f"{self.final_uncommitted_records} records, live reads read_committed "
            f"{self.live_committed_reads} / read_uncommitted {self.live_uncommitted_reads}, "
            f"records of aborted transactions seen by read_uncommitted {self.aborted_seen_uncommitted}, "
            f"commit retries {self.commit_retries}, producers replaced after a fatal error {self.fatal})"
        )

    def details(self, limit: int = 10) -> str:
        out = [self.summary()]
        for name in ("aborted_reads", "torn", "lost", "duplicated", "phantom", "unexpected", "reordered",
                     "short"):
            v = getattr(self, name)
            if v:
                items = list(v.items()) if isinstance(v, dict) else list(v)
                out.append(f"  {name} ({len(items)}): {items[:limit]}")
        return "\n".join(out)


def check_txn(h: TxnHistory, final_committed: TxnRead, final_uncommitted: TxnRead) -> TxnCheckResult:
    """The anomalies of the transactional history ``h`` against the final reads (see above)."""
    r = TxnCheckResult(
        aborted_on_purpose=h.aborted_on_purpose, aborted_after_error=h.aborted_after_error,
        commit_retries=h.commit_retries, fatal=h.fatal,
        live_committed_reads=len(h.read_committed), live_uncommitted_reads=len(h.read_uncommitted),
        final_committed_records=len(final_committed), final_uncommitted_records=len(final_uncommitted),
    )
    sent = {v: txn for txn, recs in h.txns.items() for _p, v in recs}
    for txn, out in h.outcome.items():
        if out == "committed":
            r.committed += 1
            r.committed_records += len(h.txns[txn])
        elif out == "aborted":
            r.aborted += 1
        else:
            r.uncertain += 1
    # the final log (read_uncommitted: every data record below the high watermark)
    at: dict[tuple[int, int], str] = {}
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, o, v in final_uncommitted:
        at[(p, o)] = v
        where[v].append((p, o))
        if v not in sent:
            r.unexpected.append(("final read_uncommitted", (p, o, v)))
        elif h.outcome.get(sent[v]) == "aborted":
            r.aborted_seen_uncommitted += 1
    r.duplicated = {v: locs for v, locs in where.items() if len(locs) > 1}
    live = (("live read_uncommitted", h.read_uncommitted), ("live read_committed", h.read_committed))
    for reader, reads in (*live, ("final read_committed", final_committed)):
        for rec in set(reads):
            p, o, v = rec
            if v not in sent:
                r.unexpected.append((reader, rec))
                continue
            if at.get((p, o)) != v:
                r.phantom.append((reader, rec, at.get((p, o))))
    # read_committed readers: never an aborted record, every transaction whole or absent
    r.short = [level for level in ("read_committed", "read_uncommitted") if level not in h.reached_end]
    for reader, reads in (live[1], ("final read_committed", final_committed)):
        seen: dict[str, set[str]] = defaultdict(set)
        for rec in reads:
            of = sent.get(rec[2])
            if of is None:
                continue
            if h.outcome.get(of) == "aborted":
                r.aborted_reads.append((reader, rec))
            seen[of].add(rec[2])
        for txn, values in seen.items():
            if reader == "live read_committed" and "read_committed" in r.short:
                break  # stopped short of the end (reported): a transaction may be half read
            if h.outcome.get(txn) != "aborted" and len(values) != len(h.txns[txn]):
                r.torn.append((reader, txn, len(values), len(h.txns[txn])))
        if reader == "final read_committed":
            for txn, out in h.outcome.items():
                if out == "committed":
                    for p, v in h.txns[txn]:
                        if v not in seen.get(txn, ()):
                            r.lost.append((txn, p, v))
                elif out == "uncertain":
                    if seen.get(txn):
                        r.uncertain_committed += 1
                    else:
                        r.uncertain_absent += 1
    # one transaction's records in one partition: offsets in send order
    for txn, recs in h.txns.items():
        last: dict[int, tuple[int, str]] = {}
        for p, v in recs:
            locs = where.get(v)
            if not locs:
                continue
            o = locs[0][1]
            prev = last.get(p)
            if prev is not None and o <= prev[0]:
                r.reordered.append((txn, f"{prev[1]}@{prev[0]}", f"{v}@{o}"))
            last[p] = (o, v)
    return r


class TxnWorkload:
    """Transactional producers and read_committed / read_uncommitted readers on ``topic`` (see
    the comment above :class:`TxnHistory`); :meth:`start`, faults by the caller, :meth:`stop`."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        producers: int = 2,
        rate: float = 5.0,  # transactions per second per producer
        min_records: int = 2,
        max_records: int = 6,
        abort_ratio: float = 0.25,
        transaction_timeout_ms: int = 30_000,
        seed: int = 0,
    ) -> None:
        import confluent_kafka  # noqa: F401  (fail early without it)

        if partitions < 2:
            raise ValueError("a transaction spans at least two partitions: give the topic two or more")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.n_producers = producers
        self.rate = rate
        self.min_records = max(2, min_records)
        self.max_records = max(self.min_records, max_records)
        self.abort_ratio = abort_ratio
        self.transaction_timeout_ms = transaction_timeout_ms
        self.seed = seed
        self.run_id = uuid.uuid4().hex[:8]
        self.history = TxnHistory()
        self._stop_producing = threading.Event()
        self._producers_done = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> TxnWorkload:
        for level in ("read_committed", "read_uncommitted"):
            self._spawn(f"txn-{level}", functools.partial(self._read, level))
        for i in range(self.n_producers):
            self._spawn(f"txn-producer-{i}", functools.partial(self._produce, i))
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except Exception as e:  # the history says what broke; the checker decides
                self.history.note_error(name, f"thread died: {e!r}")

        t = threading.Thread(target=run, name=f"jepsen-{name}", daemon=True)
        self._threads.append(t)
        t.start()

    @property
    def finished(self) -> int:
        """Transactions with an outcome (committed, aborted or uncertain)."""
        return len(self.history.outcome)

    @property
    def committed(self) -> int:
        with self.history.lock:
            return sum(1 for o in self.history.outcome.values() if o == "committed")

    def wait_committed(self, more: int, timeout: float = 60.0) -> bool:
        target = self.committed + more
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.committed >= target:
                return True
            time.sleep(0.1)
        return False

    def stop(self, drain: float = 60.0, timeout: float = 150.0) -> None:
        """Stop the producers (each ends its transaction), then let the readers read up to the
        end of every partition (at most ``drain`` seconds) and stop them."""
        self._stop_producing.set()
        for t in self._threads:
            if t.name.startswith("jepsen-txn-producer"):
                t.join(timeout)
        self._producers_done.set()
        for t in self._threads:
            if not t.name.startswith("jepsen-txn-producer"):
                t.join(drain)
        self._stop_consuming.set()
        for t in self._threads:
            t.join(30)

    # ------------------------------------------------------------------ threads
    def _new_producer(self, i: int) -> Any:
        import confluent_kafka

        h = self.history
        who = f"txn-producer-{i}"
        return confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap,
            "transactional.id": f"jepsen-{self.run_id}-{i}",
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "linger.ms": 5,
            "topic.metadata.refresh.interval.ms": 1000,
            "retry.backoff.ms": 100,
            "error_cb": lambda err: h.note_error(who, err),
            "log_level": 0,
        })

    def _produce(self, i: int) -> None:
        import random

        import confluent_kafka

        h = self.history
        who = f"txn-producer-{i}"
        rng = random.Random(self.seed * 1000 + i)
        n = 0
        interval = 1.0 / self.rate

        def kerr(e: Exception) -> Any:
            return e.args[0] if e.args and isinstance(e.args[0], confluent_kafka.KafkaError) else None

        while not self._stop_producing.is_set():
            p = self._new_producer(i)
            # init_transactions: retried while retriable; a fatal error makes a new producer
            ready = False
            while not self._stop_producing.is_set():
                try:
                    p.init_transactions(30)
                    ready = True
                    break
                except confluent_kafka.KafkaException as e:
                    h.note_error(who, f"init_transactions: {e}")
                    err = kerr(e)
                    if err is not None and err.retriable():
                        time.sleep(0.2)
                        continue
                    break
            if not ready:
                if not self._stop_producing.is_set():
                    with h.lock:
                        h.fatal += 1
                    time.sleep(0.5)
                continue
            fatal = False
            next_at = time.monotonic()
            while not fatal and not self._stop_producing.is_set():
                txn = f"x{i}-{n}"
                n += 1
                k = rng.randint(self.min_records, self.max_records)
                parts = rng.sample(range(self.partitions), min(k, self.partitions))
                while len(parts) < k:  # more records than partitions: some get two
                    parts.append(rng.randrange(self.partitions))
                recs = [(part, f"{txn}:{j}/{k}") for j, part in enumerate(parts)]
                abort = rng.random() < self.abort_ratio
                commit_asked = False
                outcome: str | None = None
                with h.lock:
                    h.txns[txn] = recs
                try:
                    p.begin_transaction()
                    for part, v in recs:
                        while True:
                            try:
                                p.produce(self.topic, value=v.encode(), partition=part)
                                break
                            except BufferError:
                                p.poll(0.05)
                    p.poll(0)
                    if abort:  # the records reach the partitions first (abort would purge them)
                        p.flush(self.transaction_timeout_ms / 1000)
                        outcome = self._abort(p, who, kerr)
                        if outcome == "aborted":
                            with h.lock:
                                h.aborted_on_purpose += 1
                    else:
                        commit_asked = True
                        outcome = self._commit(p, who, kerr)
                        if outcome == "aborted":
                            with h.lock:
                                h.aborted_after_error += 1
                except confluent_kafka.KafkaException as e:
                    # begin_transaction / produce failed: the commit was never asked for
                    h.note_error(who, f"{txn}: {e}")
                    err = kerr(e)
                    if err is not None and err.txn_requires_abort():
                        outcome = self._abort(p, who, kerr)
                        if outcome == "aborted":
                            with h.lock:
                                h.aborted_after_error += 1
                    else:
                        outcome = "fatal"
                if outcome in ("fatal", "uncertain", None):
                    fatal = True
                    # never asked to commit: the coordinator can only abort it
                    outcome = "uncertain" if commit_asked else "aborted"
                    with h.lock:
                        h.fatal += 1
                        if outcome == "aborted":
                            h.aborted_after_error += 1
                with h.lock:
                    h.outcome[txn] = outcome
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))
            if fatal:  # drop the producer; a new one with the same transactional.id fences it
                with contextlib.suppress(Exception):
                    p.purge()
                del p

    def _commit(self, p: Any, who: str, kerr: Callable[[Exception], Any]) -> str:
        """commit_transaction, retried while retriable: committed, aborted (an abortable error,
        then abort_transaction), uncertain (fatal or out of retries)."""
        import confluent_kafka

        h = self.history
        for _attempt in range(10):
            try:
                p.commit_transaction(30)
                return "committed"
            except confluent_kafka.KafkaException as e:
                h.note_error(who, f"commit_transaction: {e}")
                err = kerr(e)
                if err is None or err.fatal():
                    return "uncertain"
                if err.txn_requires_abort():
                    return "aborted" if self._abort(p, who, kerr) == "aborted" else "uncertain"
                if err.retriable():
                    with h.lock:
                        h.commit_retries += 1
                    continue
                return "uncertain"
        return "uncertain"

    def _abort(self, p: Any, who: str, kerr: Callable[[Exception], Any]) -> str:
        """abort_transaction, retried while retriable: aborted, or fatal."""
        import confluent_kafka

        h = self.history
        for _attempt in range(10):
            try:
                p.abort_transaction(30)
                return "aborted"
            except confluent_kafka.KafkaException as e:
                h.note_error(who, f"abort_transaction: {e}")
                err = kerr(e)
                if err is not None and err.retriable() and not err.fatal():
                    with h.lock:
                        h.abort_retries += 1
                    continue
                return "fatal"
        return "fatal"

    def _read(self, level: str) -> None:
        h = self.history
        out = h.read_committed if level == "read_committed" else h.read_uncommitted
        for recs in _read_partitions(self.bootstrap, self.topic, self.partitions, level,
                                     stop=self._stop_consuming, done=self._producers_done,
                                     on_error=lambda e: h.note_error(f"txn-{level}", e)):
            with h.lock:
                out.extend(recs)
        if not self._stop_consuming.is_set():  # (returned by itself: every partition at its end)
            with h.lock:
                h.reached_end.add(level)


def _read_partitions(bootstrap: str, topic: str, partitions: int, level: str, *,
                     stop: threading.Event, done: threading.Event,
                     on_error: Callable[[object], None] | None = None) -> Any:
    """Yield lists of (partition, offset, value) read from every partition of ``topic`` from
    the start with ``isolation.level=level``, until ``stop`` is set, or until every partition
    reached its end (partition EOF: the high watermark, or the LSO for read_committed) once
    ``done`` was set."""
    import confluent_kafka

    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"txn-read-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "isolation.level": level,
        "enable.partition.eof": True,
        "topic.metadata.refresh.interval.ms": 1000,
        "error_cb": (lambda err: on_error(err)) if on_error is not None else (lambda err: None),
        "log_level": 0,
    })
    try:
        pos: dict[int, int] = {}  # the next offset after the last record read

        def assign() -> None:  # (again: librdkafka reports a partition's EOF once per assignment)
            c.assign([confluent_kafka.TopicPartition(topic, p, pos.get(p, confluent_kafka.OFFSET_BEGINNING))
                      for p in range(partitions)])

        assign()
        at_end: set[int] = set()
        rearmed = False
        while not stop.is_set():
            was_done = done.is_set()
            if was_done and not rearmed:
                rearmed = True
                assign()
            got = []
            for m in c.consume(500, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        if was_done:
                            at_end.add(_record(m)[0])
                    elif on_error is not None:
                        on_error(err)
                    continue
                rec = _record(m)
                at_end.discard(rec[0])
                pos[rec[0]] = rec[1] + 1
                got.append(rec)
            if got:
                yield got
            if was_done and len(at_end) == partitions:
                return
    finally:
        c.close()


def final_txn_read(bootstrap: str, topic: str, partitions: int, level: str, timeout: float = 60.0) -> TxnRead:
    """Every record of ``topic`` with ``isolation.level=level``, from the start up to each
    partition's end (partition EOF); raises TimeoutError if not every partition got there."""
    stop = threading.Event()
    done = threading.Event()
    done.set()
    timer = threading.Timer(timeout, stop.set)
    timer.start()
    out: TxnRead = []
    try:
        for recs in _read_partitions(bootstrap, topic, partitions, level, stop=stop, done=done):
            out.extend(recs)
    finally:
        timer.cancel()
    if stop.is_set():
        raise TimeoutError(f"final {level} read of {topic} did not reach the end in {timeout}s")
    return out
