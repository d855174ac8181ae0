"""``strom metadata-quorum`` and ``strom cluster``: argument parsing and Kafka's output shapes,
from decoded responses (no broker)."""

from __future__ import annotations

import uuid

import pytest

from strom.cli.cluster_tools import (
    cluster_lines,
    endpoint_lines,
    pretty_table,
    replication_lines,
    status_lines,
)
from strom.cli.commands import CommandError
from strom.cli.main import build_parser, run
from strom.client.cluster_admin import (
    BrokerInfo,
    ClusterDescription,
    QuorumInfo,
    QuorumNode,
    ReplicaState,
)

DIR1 = uuid.UUID(int=1)


def quorum(**kw: object) -> QuorumInfo:
    base: dict[str, object] = {
        "leader_id": 2,
        "leader_epoch": 7,
        "high_watermark": 120,
        "voters": (
            ReplicaState(1, 100, None, 1_000, 900),
            ReplicaState(2, 130, DIR1, 1_100, 1_100),
            ReplicaState(3, 125, None, 1_050, 1_000),
        ),
        "observers": (ReplicaState(4, 110, None, 1_020, 950),),
        "nodes": {
            1: QuorumNode(1, (("CONTROLLER", "127.0.0.1", 9093),)),
            2: QuorumNode(2, (("CONTROLLER", "::1", 9094),)),
        },
    }
    base.update(kw)
    return QuorumInfo(**base)  # type: ignore[arg-type]


def test_status_matches_kafkas_layout() -> None:
    lines = status_lines("abc", quorum())
    assert lines == [
        "ClusterId:              abc",
        "LeaderId:               2",
        "LeaderEpoch:            7",
        "HighWatermark:          120",
        # the leader's LEO minus the smallest voter LEO (observers do not count)
        "MaxFollowerLag:         30",
        # leader's last caught up minus the laggard's
        "MaxFollowerLagTimeMs:   200",
        'CurrentVoters:          [{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:9093"]}, '
        '{"id": 2, "directoryId": "AAAAAAAAAAAAAAAAAAAAAQ", "endpoints": ["CONTROLLER://[::1]:9094"]}, '
        '{"id": 3}]',
        'CurrentObservers:       [{"id": 4}]',
    ]


def test_status_lag_time_zero_when_leader_is_the_laggard_and_unknown_without_timestamps() -> None:
    single = quorum(voters=(ReplicaState(2, 130),), observers=(), nodes={})
    assert status_lines("c", single)[4:6] == ["MaxFollowerLag:         0", "MaxFollowerLagTimeMs:   0"]
    unknown = quorum(voters=(ReplicaState(2, 130, None, 5, 5), ReplicaState(1, 100)))
    assert status_lines("c", unknown)[5] == "MaxFollowerLagTimeMs:   -1"


def test_status_without_leader_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="no elected leader"):
        status_lines("c", quorum(leader_id=-1))


def test_pretty_table_pads_every_cell_and_ends_each_with_a_tab() -> None:
    assert pretty_table(("A", "Long"), [["xyz", "1"]]) == ["A  \tLong\t", "xyz\t1   \t"]


def test_replication_rows_leader_first_then_followers_then_observers() -> None:
    lines = replication_lines(quorum(), now_ms=2_000)
    rows = [line.rstrip("\t").split("\t") for line in lines]
    assert [c.strip() for c in rows[0]] == [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    body = [[c.strip() for c in r] for r in rows[1:]]
    assert body == [
        ["2", "AAAAAAAAAAAAAAAAAAAAAQ", "130", "0", "1100", "1100", "Leader"],
        ["1", "AAAAAAAAAAAAAAAAAAAAAA", "100", "30", "1000", "900", "Follower"],
        ["3", "AAAAAAAAAAAAAAAAAAAAAA", "125", "5", "1050", "1000", "Follower"],
        ["4", "AAAAAAAAAAAAAAAAAAAAAA", "110", "20", "1020", "950", "Observer"],
    ]
    # columns line up: every line has its tabs at the same offsets
    offsets = {tuple(i for i, ch in enumerate(line) if ch == "\t") for line in lines}
    assert len(offsets) == 1


def test_replication_human_readable_and_unknown_timestamps() -> None:
    q = quorum(voters=(ReplicaState(2, 130, None, 1_500, -1),), observers=())
    row = replication_lines(q, now_ms=2_000, human_readable=True)[1].split("\t")
    assert [c.strip() for c in row[4:6]] == ["500 ms ago", "-1"]
    with pytest.raises(CommandError, match="possible drift in system clock"):
        replication_lines(
            quorum(voters=(ReplicaState(2, 1, None, 5_000, 1),)), now_ms=2_000, human_readable=True
        )


def desc() -> ClusterDescription:
    return ClusterDescription(
        "cid",
        1,
        (BrokerInfo(1, "h1", 9092, "r1", False), BrokerInfo(2, "h2", 9093, None, True)),
    )


def test_endpoints_and_cluster_output() -> None:
    rows = [
        [c.strip() for c in line.rstrip("\t").split("\t")]
        for line in endpoint_lines(desc(), include_fenced=True)
    ]
    assert rows == [
        ["ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE"],
        ["1", "h1", "9092", "r1", "unfenced", "broker"],
        ["2", "h2", "9093", "null", "fenced", "broker"],
    ]
    assert len(endpoint_lines(desc(), include_fenced=False)) == 2
    lines = cluster_lines(desc())
    assert lines[:2] == ["Cluster ID: cid", "Controller: 1"]
    assert len(lines) == 5


def test_parsing() -> None:
    p = build_parser()
    a = p.parse_args(
        ["metadata-quorum", "--bootstrap-server", "h:1", "describe", "--replication", "--human-readable"]
    )
    assert (a.command, a.action, a.replication, a.human_readable, a.bootstrap_server) == (
        "metadata-quorum",
        "describe",
        True,
        True,
        "h:1",
    )
    a = p.parse_args(["cluster", "--bootstrap-server", "h:1", "list-endpoints", "--include-fenced-brokers"])
    assert (a.action, a.include_fenced_brokers) == ("list-endpoints", True)
    assert p.parse_args(["cluster"]).action is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["describe", "--status", "--replication"], "Only one of --status or --replication"),
        (["describe"], "One of --status or --replication must be specified"),
        (["describe", "--status", "--human-readable"], "only supported along with --replication"),
    ],
)
def test_metadata_quorum_option_errors_are_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["metadata-quorum", "--bootstrap-server", "127.0.0.1:1", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]
