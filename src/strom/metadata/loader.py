"""The metadata loader: committed metadata log batches and snapshots in, images out to publishers.

Theory of operation (Kafka's ``MetadataLoader`` + ``MetadataBatchLoader``)
-------------------------------------------------------------------------
The Raft client tells its listener about committed data: ``handle_commit(batches)`` with whole
RecordBatch v2 batches up to the high watermark, and ``handle_load_snapshot(end_offset, epoch,
data)`` (the snapshot id and its record batches) when the node must start from a snapshot (at
start-up, or a follower too far behind). The loader keeps the current :class:`MetadataImage` and
one open :class:`MetadataDelta` on top of it:

* each batch's records are replayed into the delta, in order; control batches (leader changes,
  snapshot header/footer) only move the offset;
* at the end of a ``handle_commit`` call the delta is applied and every publisher is called with
  ``on_metadata_update(delta, new_image, LogDeltaManifest)``; then a fresh delta opens on the new
  image. A call whose records leave nothing to publish (only control batches) publishes nothing;
* a snapshot replaces the image: its records are replayed into a delta over the current image,
  ``finish_snapshot()`` marks what the snapshot lacks as removed, and publishers get the delta with
  a :class:`SnapshotManifest`. Pending, unpublished log records are dropped (the snapshot is newer);
* metadata transactions (KIP-868): records between a BeginTransactionRecord and its
  EndTransactionRecord are published together, never half; an AbortTransactionRecord drops them.
  Records pending when a transaction begins are published first. A transaction still open at the
  end of ``handle_commit`` stays pending until a later call ends it;
* until the log has been read up to the high watermark known at start-up (``high_watermark``, when
  given), nothing is published: a broker does not serve a half-loaded, older picture (Kafka's
  "catching up" state);
* a publisher installed late first gets the whole current image as a delta over the empty image
  with a :class:`SnapshotManifest` (Kafka's ``installPublishers``).

A publisher raising an exception is logged and the others still run (Kafka's fault handler); the
image moves on regardless.

Error contract: malformed batches or records raise :class:`~strom.metadata.records.MetadataParseError`
and records that contradict the image raise :class:`~strom.metadata.image.MetadataReplayError`, both
with the offset in the message; the loader should then be considered failed (Kafka treats both
as faults it cannot recover from without a restart).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from ..protocol.records import CorruptRecordError, decode_batch_records, iter_batches
from .delta import MetadataDelta
from .image import EMPTY_IMAGE, MetadataImage, MetadataProvenance, MetadataReplayError
from .records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    MetadataParseError,
    MetadataRecord,
    decode,
    iter_batch_records,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderAndEpoch:
    leader_id: int | None
    epoch: int


@dataclass(frozen=True)
class LogDeltaManifest:
    """Published after replaying log batches."""

    provenance: MetadataProvenance
    leader_and_epoch: LeaderAndEpoch
    num_batches: int
    num_bytes: int


@dataclass(frozen=True)
class SnapshotManifest:
    """Published after loading a snapshot (or to catch up a newly installed publisher)."""

    provenance: MetadataProvenance


LoaderManifest = LogDeltaManifest | SnapshotManifest


class MetadataPublisher(Protocol):
    """Something that follows the metadata image (Kafka's ``MetadataPublisher``); a ``close()``
    method, if it has one, is called when it is removed or the loader closes."""

    def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None: ...


_NO_TXN, _IN_TXN = 0, 1


class CommittedBatchLike(Protocol):
    """A committed batch as the Raft node hands it over (``strom.raft.quorum.CommittedBatch``)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def append_timestamp(self) -> int: ...
    @property
    def records(self) -> tuple[bytes, ...]: ...
    @property
    def control(self) -> bool: ...


class MetadataLoader:
    def __init__(self, high_watermark: int | None = None) -> None:
        """``high_watermark``: the committed end of the log at start-up; publishing waits until
        the image reaches it (``None``: publish from the first commit)."""
        self._image = EMPTY_IMAGE
        self._delta = MetadataDelta(self._image)
        self._publishers: list[MetadataPublisher] = []
        self._newcomers: list[MetadataPublisher] = []  # installed, not yet given the image
        self._catch_up_to = high_watermark
        self._leader = LeaderAndEpoch(None, -1)
        self._txn = _NO_TXN
        # progress since the last publish
        self._offset = -1
        self._epoch = -1
        self._time_ms = -1
        self._batches = 0
        self._bytes = 0
        self._records = 0  # records replayed into the open delta (0: nothing to publish)

    # -- state
    @property
    def image(self) -> MetadataImage:
        """The current image: the last one published (while catching up, it moves on unpublished)."""
        return self._image

    @property
    def last_offset(self) -> int:
        """The last offset read (published or not)."""
        return self._offset

    @property
    def catching_up(self) -> bool:
        return self._catch_up_to is not None

    # -- publishers
    def install_publishers(self, publishers: Iterable[MetadataPublisher]) -> None:
        """Add publishers. Once something is loaded, each first gets the whole current image (as a
        delta over the empty image, with a SnapshotManifest): at once if the loader has caught up,
        else when it has."""
        for p in publishers:
            if p in self._publishers or p in self._newcomers:
                raise ValueError(f"publisher {p!r} is already installed")
            if not self.catching_up and self._image.offset < 0:
                self._publishers.append(p)  # nothing loaded yet: the deltas to come are the image
            else:
                self._newcomers.append(p)
        if not self.catching_up:
            self._initialize_newcomers()

    def remove_publisher(self, publisher: MetadataPublisher) -> None:
        if publisher in self._newcomers:
            self._newcomers.remove(publisher)
        else:
            self._publishers.remove(publisher)
        _close(publisher)

    def close(self) -> None:
        for p in self._publishers + self._newcomers:
            _close(p)
        self._publishers.clear()
        self._newcomers.clear()

    # -- Raft listener
    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self._leader = LeaderAndEpoch(leader_id, epoch)

    def handle_commit(self, batches: bytes | bytearray | memoryview | Iterable[bytes]) -> None:
        """Replay committed batches (RecordBatch v2 bytes, or a sequence of them) and publish."""
        chunks = [batches] if isinstance(batches, bytes | bytearray | memoryview) else list(batches)
        for chunk in chunks:
            self._load_batches(chunk)
        self._maybe_publish()

    def handle_committed(self, batches: Iterable[CommittedBatchLike]) -> None:
        """Replay committed batches as the Raft node delivers them (``strom.raft.quorum.
        CommittedBatch``: offsets, epoch, the records' values) and publish."""
        for batch in batches:
            self._batches += 1
            self._bytes += sum(len(r) for r in batch.records)
            self._epoch = batch.epoch
            self._time_ms = batch.append_timestamp
            if not batch.control:
                for i, value in enumerate(batch.records):
                    offset = batch.base_offset + i
                    try:
                        record = decode(value)
                    except MetadataParseError as e:
                        raise MetadataParseError(f"metadata record at offset {offset}: {e}") from e
                    self._replay_one(record, offset)
            self._offset = batch.last_offset
        self._maybe_publish()

    def handle_load_snapshot(self, end_offset: int, epoch: int, data: bytes, timestamp_ms: int = -1) -> None:
        """Replace the image with a snapshot whose id is (``end_offset``, ``epoch``): it holds
        everything below ``end_offset``. ``data`` is the snapshot's record batches."""
        delta = MetadataDelta(self._image)
        for offset, rec in iter_batch_records(data):
            _replay(delta, rec, offset)
        delta.finish_snapshot()
        provenance = MetadataProvenance(end_offset - 1, epoch, timestamp_ms)
        self._image = delta.apply(provenance)
        self._offset, self._epoch, self._time_ms = end_offset - 1, epoch, timestamp_ms
        self._reset_pending()
        self._txn = _NO_TXN
        self._check_caught_up()
        self._publish(delta, self._image, SnapshotManifest(provenance))

    # -- internals
    def _load_batches(self, buf: bytes | bytearray | memoryview) -> None:
        try:
            for pos, header in iter_batches(buf):
                self._batches += 1
                self._bytes += header.size
                self._offset = header.last_offset
                self._epoch = header.partition_leader_epoch
                self._time_ms = header.max_timestamp
                if header.is_control:
                    continue
                for rec in decode_batch_records(buf, pos, header):
                    if rec.value is None:
                        raise MetadataParseError(f"metadata record at offset {rec.offset} has no value")
                    try:
                        record = decode(rec.value)
                    except MetadataParseError as e:
                        raise MetadataParseError(f"metadata record at offset {rec.offset}: {e}") from e
                    self._replay_one(record, rec.offset)
        except CorruptRecordError as e:
            raise MetadataParseError(f"malformed metadata batch: {e}") from e

    def _replay_one(self, record: MetadataRecord, offset: int) -> None:
        if isinstance(record, BeginTransactionRecord):
            if self._txn == _IN_TXN:
                raise MetadataReplayError(f"offset {offset}: a transaction began inside another one")
            if self._records:  # publish what came before, so the transaction stands alone
                self._publish_pending(offset - 1)
            self._txn = _IN_TXN
            self._records += 1
        elif isinstance(record, EndTransactionRecord | AbortTransactionRecord):
            if self._txn != _IN_TXN:
                raise MetadataReplayError(f"offset {offset}: {type(record).__name__} outside a transaction")
            self._txn = _NO_TXN
            if isinstance(record, AbortTransactionRecord):
                self._delta = MetadataDelta(self._image)
            self._records += 1
        else:
            _replay(self._delta, record, offset)
            self._records += 1

    def _check_caught_up(self) -> None:
        if self._catch_up_to is not None and self._offset + 1 >= self._catch_up_to:
            self._catch_up_to = None

    def _maybe_publish(self) -> None:
        self._check_caught_up()
        if self._txn == _NO_TXN and self._records:
            self._publish_pending(self._offset)
        elif not self.catching_up and self._newcomers and self._image.offset >= 0:
            self._initialize_newcomers()

    def _publish_pending(self, offset: int) -> None:
        """Apply the open delta (the image moves on even while catching up) and publish it."""
        provenance = MetadataProvenance(offset, self._epoch, self._time_ms)
        delta = self._delta
        self._image = delta.apply(provenance)
        manifest = LogDeltaManifest(provenance, self._leader, self._batches, self._bytes)
        self._reset_pending()
        self._publish(delta, self._image, manifest)

    def _reset_pending(self) -> None:
        self._delta = MetadataDelta(self._image)
        self._batches = 0
        self._bytes = 0
        self._records = 0

    def _publish(self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest) -> None:
        if self.catching_up:
            return
        for p in list(self._publishers):
            self._call(p, delta, image, manifest)
        self._initialize_newcomers()

    def _initialize_newcomers(self) -> None:
        if not self._newcomers:
            return
        newcomers, self._newcomers = self._newcomers, []
        delta = MetadataDelta(EMPTY_IMAGE)
        for rec in self._image.to_records():
            delta.replay(rec)
        for p in newcomers:
            self._publishers.append(p)
            self._call(p, delta, self._image, SnapshotManifest(self._image.provenance))

    @staticmethod
    def _call(
        p: MetadataPublisher, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        try:
            p.on_metadata_update(delta, image, manifest)
        except Exception:
            log.exception("metadata publisher %r failed on the image at offset %d", p, image.offset)


def _replay(delta: MetadataDelta, record: MetadataRecord, offset: int) -> None:
    try:
        delta.replay(record)
    except MetadataReplayError as e:
        raise MetadataReplayError(f"offset {offset}: {e}") from e


def _close(p: object) -> None:
    close: Callable[[], object] | None = getattr(p, "close", None)
    if close is not None:
        try:
            close()
        except Exception:
            log.exception("metadata publisher %r failed to close", p)
