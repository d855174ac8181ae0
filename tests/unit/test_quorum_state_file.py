"""The ``quorum-state`` file: Kafka 4's JSON, atomic durable writes, clear errors."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from strom.raft.log import ElectionState, RaftStorageError
from strom.raft.quorum_state_file import QUORUM_STATE_FILE, FileQuorumStateStore
from strom.testing.powerloss import PowerCut, PowerLossFS


def test_missing_file_reads_as_fresh(tmp_path: Path) -> None:
    assert FileQuorumStateStore(tmp_path / "nowhere").read() is None


@pytest.mark.parametrize("state", [
    ElectionState(0),
    ElectionState(5, leader_id=2),
    ElectionState(7, voted_id=3),
    ElectionState(2**31 - 1, leader_id=0, voted_id=0),
])
def test_round_trip(tmp_path: Path, state: ElectionState) -> None:
    store = FileQuorumStateStore(tmp_path)
    store.write(state)
    assert store.read() == state
    assert FileQuorumStateStore(tmp_path).read() == state


def test_written_as_kafka_4_writes_it(tmp_path: Path) -> None:
    FileQuorumStateStore(tmp_path).write(ElectionState(5, leader_id=1))
    assert (tmp_path / QUORUM_STATE_FILE).read_text() == (
        '{"leaderId":1,"leaderEpoch":5,"votedId":-1,'
        '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'
    )


def test_reads_kafkas_version_0_and_1_files(tmp_path: Path) -> None:
    path = tmp_path / QUORUM_STATE_FILE
    path.write_text('{"clusterId":"","leaderId":-1,"leaderEpoch":2,"votedId":1,"appliedOffset":0,'
                    '"currentVoters":[{"voterId":1},{"voterId":2}],"data_version":0}\n')
    assert FileQuorumStateStore(tmp_path).read() == ElectionState(2, voted_id=1)
    path.write_text('{"leaderId":-1,"leaderEpoch":9,"votedId":3,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ",'
                    '"data_version":1}')
    assert FileQuorumStateStore(tmp_path).read() == ElectionState(9, voted_id=3)


@pytest.mark.parametrize("content, message", [
    ("", "not valid JSON"),
    ("{\"leaderId\":1,", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"leaderId":1,"leaderEpoch":2,"votedId":-1}', "no data_version"),
    ('{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":7}', "data_version 7"),
    ('{"leaderId":"1","leaderEpoch":2,"votedId":-1,"data_version":1}', "invalid leaderId"),
    ('{"leaderId":1,"leaderEpoch":2.5,"votedId":-1,"data_version":1}', "invalid leaderEpoch"),
    ('{"leaderId":1,"leaderEpoch":-4,"votedId":-1,"data_version":1}', "invalid leaderEpoch"),
    ('{"leaderId":1,"votedId":-1,"data_version":1}', "negative leaderEpoch"),
    ('{"leaderId":1,"leaderEpoch":3,"votedId":true,"data_version":1}', "invalid votedId"),
    ('{"leaderId":1,"leaderEpoch":3,"votedId":-1,"votedDirectoryId":5,"data_version":1}', "votedDirectoryId"),
])
def test_corrupt_content_names_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / QUORUM_STATE_FILE
    path.write_text(content)
    with pytest.raises(RaftStorageError, match=message) as info:
        FileQuorumStateStore(tmp_path).read()
    assert str(path) in str(info.value)


def test_unreadable_bytes_name_the_file(tmp_path: Path) -> None:
    (tmp_path / QUORUM_STATE_FILE).write_bytes(b"\xff\xfe{")
    with pytest.raises(RaftStorageError, match=QUORUM_STATE_FILE):
        FileQuorumStateStore(tmp_path).read()


def test_write_error_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(RaftStorageError, match="cannot write"):
        FileQuorumStateStore(tmp_path / "file" / "sub").write(ElectionState(1))


def test_a_power_cut_leaves_the_old_or_the_new_state(tmp_path: Path) -> None:
    root = tmp_path / "meta"
    store = FileQuorumStateStore(root)
    store.write(ElectionState(3, voted_id=1))
    seen = set()
    for n in (1, 2, 3):  # lose power after the n-th fsync of the write (file, then directory)
        with PowerLossFS(root) as fs:
            fs.crash_after(n)
            with contextlib.suppress(PowerCut):
                store.write(ElectionState(4, leader_id=2))
            fs.disarm()
            fs.cut()
            got = store.read()
            seen.add(got)
            assert got in (ElectionState(3, voted_id=1), ElectionState(4, leader_id=2))
        store.write(ElectionState(3, voted_id=1))
    assert seen == {ElectionState(3, voted_id=1), ElectionState(4, leader_id=2)}
    with PowerLossFS(root) as fs:  # once write() returned, the new state survives a cut
        store.write(ElectionState(6, voted_id=2))
        fs.cut()
        assert store.read() == ElectionState(6, voted_id=2)
        assert json.loads((root / QUORUM_STATE_FILE).read_text())["data_version"] == 1
