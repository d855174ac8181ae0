"""Property: the metadata image is a pure function of the record sequence, and snapshots rebuild it.

Random *valid* record sequences (a small model keeps track of brokers and their epochs, topics and
their partitions, ACLs, so every record makes sense where it lands) are replayed:

* in one delta, and in random chunks of deltas applied one after another: same image;
* ``replay(image.to_records())`` into the empty image gives the image back;
* a snapshot taken midway (``to_records`` of the image at k) plus the records after k gives the
  same image as the whole sequence; and loading that snapshot as a delta over *another* image
  with ``finish_snapshot`` gives exactly the snapshot's image;
* the records, packed into RecordBatch v2 batches and fed to a MetadataLoader, give the same image;
* ``local_changes(b)`` agrees with a direct comparison of the images before and after a delta.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.metadata import records as r
from strom.metadata.delta import MetadataDelta
from strom.metadata.image import EMPTY_IMAGE, MetadataImage, TopicPartition
from strom.metadata.loader import MetadataLoader

NAMES = ["a", "b", "c", "d"]
BROKERS = [0, 1, 2, 3]


def _uuid(n: int) -> uuid.UUID:
    return uuid.UUID(int=n + 1)


@st.composite
def record_sequences(draw: st.DrawFn, max_ops: int = 40, id_base: int = 100) -> list[r.MetadataRecord]:
    brokers: dict[int, int] = {}  # id -> epoch
    topics: dict[uuid.UUID, tuple[str, int]] = {}  # id -> (name, partition count)
    acls: set[uuid.UUID] = set()
    counter = [id_base]
    out: list[r.MetadataRecord] = []

    def fresh() -> int:
        counter[0] += 1
        return counter[0]

    replicas = st.lists(st.sampled_from(BROKERS), min_size=1, max_size=3, unique=True).map(tuple)
    maybe_ints = st.one_of(st.none(), st.lists(st.sampled_from(BROKERS), max_size=3, unique=True).map(tuple))

    def partition_record(tid: uuid.UUID, pid: int) -> r.PartitionRecord:
        reps = draw(replicas)
        isr = tuple(b for b in reps if draw(st.booleans())) or reps[:1]
        return r.PartitionRecord(
            partition_id=pid,
            topic_id=tid,
            replicas=reps,
            isr=isr,
            leader=draw(st.sampled_from([*isr, -1])),
            leader_epoch=draw(st.integers(0, 3)),
            partition_epoch=draw(st.integers(0, 3)),
            directories=tuple(_uuid(7) for _ in reps) if draw(st.booleans()) else (),
            eligible_leader_replicas=draw(maybe_ints),
        )

    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(
            st.sampled_from(
                [
                    "register",
                    "unregister",
                    "fence",
                    "change",
                    "topic",
                    "partition",
                    "pchange",
                    "rmtopic",
                    "config",
                    "quota",
                    "pid",
                    "feature",
                    "acl",
                    "rmacl",
                    "scram",
                    "controller",
                    "token",
                    "clearelr",
                    "noop",
                ]
            )
        )
        if op == "register":
            bid = draw(st.sampled_from(BROKERS))
            brokers[bid] = fresh()
            out.append(
                r.RegisterBrokerRecord(
                    broker_id=bid,
                    broker_epoch=brokers[bid],
                    incarnation_id=_uuid(fresh()),
                    end_points=(r.BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + bid),),
                    rack=draw(st.sampled_from([None, "r1", "r2"])),
                    fenced=draw(st.booleans()),
                    log_dirs=draw(st.sampled_from([(), (_uuid(bid),)])),
                )
            )
        elif op == "unregister" and brokers:
            bid = draw(st.sampled_from(sorted(brokers)))
            out.append(r.UnregisterBrokerRecord(broker_id=bid, broker_epoch=brokers.pop(bid)))
        elif op == "fence" and brokers:
            bid = draw(st.sampled_from(sorted(brokers)))
            cls = draw(st.sampled_from([r.FenceBrokerRecord, r.UnfenceBrokerRecord]))
            out.append(cls(id=bid, epoch=brokers[bid]))
        elif op == "change" and brokers:
            bid = draw(st.sampled_from(sorted(brokers)))
            out.append(
                r.BrokerRegistrationChangeRecord(
                    broker_id=bid,
                    broker_epoch=brokers[bid],
                    fenced=draw(st.sampled_from([-1, 0, 1])),
                    in_controlled_shutdown=draw(st.sampled_from([0, 1])),
                    log_dirs=draw(st.sampled_from([(), (_uuid(50),)])),
                )
            )
        elif op == "topic":
            free = [n for n in NAMES if n not in {name for name, _ in topics.values()}]
            if free:
                tid = _uuid(fresh())
                name = draw(st.sampled_from(free))
                n = draw(st.integers(1, 3))
                topics[tid] = (name, n)
                out.append(r.TopicRecord(name=name, topic_id=tid))
                out.extend(partition_record(tid, p) for p in range(n))
        elif op == "partition" and topics:
            tid = draw(st.sampled_from(sorted(topics)))
            name, n = topics[tid]
            topics[tid] = (name, n + 1)
            out.append(partition_record(tid, n))
        elif op == "pchange" and topics:
            tid = draw(st.sampled_from(sorted(topics)))
            out.append(
                r.PartitionChangeRecord(
                    partition_id=draw(st.integers(0, topics[tid][1] - 1)),
                    topic_id=tid,
                    isr=draw(maybe_ints),
                    leader=draw(st.sampled_from([-2, -2, -1, *BROKERS])),
                    replicas=draw(st.one_of(st.none(), replicas)),
                    removing_replicas=draw(maybe_ints),
                    adding_replicas=draw(maybe_ints),
                    leader_recovery_state=draw(st.sampled_from([-1, 0, 1])),
                    last_known_elr=draw(maybe_ints),
                )
            )
        elif op == "rmtopic" and topics:
            tid = draw(st.sampled_from(sorted(topics)))
            del topics[tid]
            out.append(r.RemoveTopicRecord(topic_id=tid))
        elif op == "config":
            rtype = draw(st.sampled_from([2, 4, 32]))
            out.append(
                r.ConfigRecord(
                    resource_type=rtype,
                    resource_name=draw(st.sampled_from([*NAMES, ""] if rtype != 4 else ["", "0", "1"])),
                    name=draw(st.sampled_from(["x", "y", "z"])),
                    value=draw(st.sampled_from([None, "1", "2"])),
                )
            )
        elif op == "quota":
            parts = draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(["user", "client-id", "ip"]), st.sampled_from([None, "u1", "u2"])
                    ),
                    min_size=1,
                    max_size=2,
                    unique_by=lambda t: t[0],
                )
            )
            out.append(
                r.ClientQuotaRecord(
                    entity=tuple(r.EntityData(entity_type=t, entity_name=n) for t, n in parts),
                    key=draw(st.sampled_from(["producer_byte_rate", "consumer_byte_rate"])),
                    value=draw(st.floats(0, 1e9)),
                    remove=draw(st.booleans()),
                )
            )
        elif op == "pid":
            out.append(r.ProducerIdsRecord(broker_id=0, broker_epoch=1, next_producer_id=fresh() * 1000))
        elif op == "feature":
            out.append(
                r.FeatureLevelRecord(
                    name=draw(st.sampled_from(["metadata.version", "kraft.version", "group.version"])),
                    feature_level=draw(st.integers(0, 3)),
                )
            )
        elif op == "acl":
            aid = _uuid(fresh())
            acls.add(aid)
            out.append(
                r.AccessControlEntryRecord(
                    id=aid,
                    resource_type=2,
                    resource_name=draw(st.sampled_from(NAMES)),
                    pattern_type=3,
                    principal="User:x",
                    host="*",
                    operation=draw(st.integers(2, 4)),
                    permission_type=3,
                )
            )
        elif op == "rmacl" and acls:
            aid = draw(st.sampled_from(sorted(acls)))
            acls.discard(aid)
            out.append(r.RemoveAccessControlEntryRecord(id=aid))
        elif op == "scram":
            name = draw(st.sampled_from(["alice", "bob"]))
            mech = draw(st.sampled_from([1, 2]))
            if draw(st.booleans()):
                out.append(
                    r.UserScramCredentialRecord(
                        name=name,
                        mechanism=mech,
                        salt=b"s",
                        stored_key=b"k",
                        server_key=b"v",
                        iterations=4096,
                    )
                )
            else:
                out.append(r.RemoveUserScramCredentialRecord(name=name, mechanism=mech))
        elif op == "controller":
            out.append(
                r.RegisterControllerRecord(
                    controller_id=draw(st.sampled_from([3000, 3001])),
                    incarnation_id=_uuid(fresh()),
                    end_points=(r.BrokerEndpoint(name="CONTROLLER", host="h", port=9093),),
                )
            )
        elif op == "token":
            tid = draw(st.sampled_from(["t1", "t2"]))
            if draw(st.booleans()):
                out.append(
                    r.DelegationTokenRecord(
                        owner="User:o",
                        requester="User:r",
                        renewers=("User:x",),
                        issue_timestamp=fresh(),
                        max_timestamp=fresh(),
                        expiration_timestamp=fresh(),
                        token_id=tid,
                    )
                )
            else:
                out.append(r.RemoveDelegationTokenRecord(token_id=tid))
        elif op == "clearelr":
            names = sorted({name for name, _ in topics.values()})
            out.append(r.ClearElrRecord(topic_name=draw(st.sampled_from(["", *names]))))
        elif op == "noop":
            out.append(
                draw(st.sampled_from([r.NoOpRecord(), r.ZkMigrationStateRecord(zk_migration_state=1)]))
            )
    return out


def replay(image: MetadataImage, recs: list[r.MetadataRecord]) -> MetadataImage:
    d = MetadataDelta(image)
    for rec in recs:
        d.replay(rec)
    return d.apply()


@settings(max_examples=150)
@given(record_sequences(), st.data())
def test_chunked_replay_and_snapshot_round_trip(recs: list[r.MetadataRecord], data: st.DataObject) -> None:
    whole = replay(EMPTY_IMAGE, recs)
    # chunks of deltas, applied one after the other
    image = EMPTY_IMAGE
    i = 0
    while i < len(recs):
        n = data.draw(st.integers(1, 8))
        image = replay(image, recs[i : i + n])
        i += n
    assert image == whole
    # the snapshot's records rebuild the image
    assert replay(EMPTY_IMAGE, whole.to_records()) == whole
    # a snapshot midway plus the rest
    k = data.draw(st.integers(0, len(recs)))
    mid = replay(EMPTY_IMAGE, recs[:k])
    assert replay(replay(EMPTY_IMAGE, mid.to_records()), recs[k:]) == whole


@settings(max_examples=100)
@given(record_sequences(), record_sequences(id_base=10_000))
def test_snapshot_over_another_image_gives_the_snapshot(
    a: list[r.MetadataRecord], b: list[r.MetadataRecord]
) -> None:
    other = replay(EMPTY_IMAGE, a)
    target = replay(EMPTY_IMAGE, b)
    d = MetadataDelta(other)
    for rec in target.to_records():
        d.replay(rec)
    d.finish_snapshot()
    assert d.apply() == target


@settings(max_examples=100)
@given(record_sequences(), st.data())
def test_loader_over_encoded_batches(recs: list[r.MetadataRecord], data: st.DataObject) -> None:
    seen: list[MetadataImage] = []

    class Pub:
        def on_metadata_update(self, delta: Any, image: MetadataImage, manifest: Any) -> None:
            seen.append(image)

    loader = MetadataLoader()
    loader.install_publishers([Pub()])
    offset = 0
    i = 0
    while i < len(recs):
        n = data.draw(st.integers(1, 5))
        chunk = recs[i : i + n]
        loader.handle_commit(r.build_records_batch(chunk, base_offset=offset, leader_epoch=2))
        offset += len(chunk)
        i += n
    assert loader.image.same_content(replay(EMPTY_IMAGE, recs))
    assert loader.image.offset == len(recs) - 1
    if recs:
        assert seen[-1] is loader.image


@settings(max_examples=150)
@given(record_sequences(max_ops=60), st.data(), st.sampled_from(BROKERS))
def test_local_changes_match_image_comparison(
    recs: list[r.MetadataRecord], data: st.DataObject, broker: int
) -> None:
    k = data.draw(st.integers(0, len(recs)))
    before = replay(EMPTY_IMAGE, recs[:k])
    d = MetadataDelta(before)
    for rec in recs[k:]:
        d.replay(rec)
    after = d.apply()
    changes = d.local_changes(broker)

    old = {
        (t.id, p): (t.name, reg)
        for t in before.topics.topics_by_id.values()
        for p, reg in t.partitions.items()
    }
    new = {
        (t.id, p): (t.name, reg)
        for t in after.topics.topics_by_id.values()
        for p, reg in t.partitions.items()
    }
    deletes = {
        TopicPartition(name, p)
        for (tid, p), (name, reg) in old.items()
        if broker in reg.replicas and ((tid, p) not in new or broker not in new[(tid, p)][1].replicas)
    }
    leaders, followers, elected = set(), set(), set()
    for key, (name, reg) in new.items():
        prev = old.get(key)
        if broker not in reg.replicas:
            continue
        if key[0] in d.created_topic_ids:
            prev = None  # a topic (re)created by the delta starts from nothing
        if prev is not None and prev[1].partition_epoch == reg.partition_epoch:
            continue
        tp = TopicPartition(name, key[1])
        if reg.leader == broker:
            leaders.add(tp)
            if prev is None or prev[1].leader_epoch != reg.leader_epoch:
                elected.add(tp)
        else:
            followers.add(tp)
    assert changes.deletes == deletes
    assert set(changes.leaders) == leaders
    assert set(changes.elected_leaders) == elected
    assert set(changes.followers) == followers
