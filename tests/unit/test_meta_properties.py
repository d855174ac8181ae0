"""meta.properties as Kafka 4 writes it, strom's earlier files, the start-up checks of
load_meta (a refused start writes nothing) and format_dirs (``strom storage format``)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.config import ConfigError
from strom.log.log_dirs import (
    META_FILE,
    MetaProperties,
    format_dirs,
    format_uuid,
    load_meta,
    parse_uuid,
    random_uuid,
    read_meta_properties,
    write_meta_properties,
)

KAFKA_V1 = """#
#Tue Nov 25 10:00:00 UTC 2025
node.id=1
directory.id=OTCwX2QhQ8y3dyW7SHz0Kw
version=1
cluster.id=MkU3OEVBNTcwNTJENDM2Qk
"""
STROM_OLD = "#strom\nversion=1\nnode.id=1\ncluster.id=strom-cluster-0000000001\n"
STROM_OLD_WITH_DIR = STROM_OLD + "directory.id=OTCwX2QhQ8y3dyW7SHz0Kw\n"


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file and dir under ``root`` (dirs as None)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))
    }


def ids(*values: int) -> Iterator[uuid.UUID]:
    for v in values:
        yield uuid.UUID(int=v)


# ------------------------------------------------------------------ the file


def test_reads_kafka_v1() -> None:
    m = MetaProperties.parse(KAFKA_V1)
    assert m == MetaProperties(1, "MkU3OEVBNTcwNTJENDM2Qk", 1, parse_uuid("OTCwX2QhQ8y3dyW7SHz0Kw"))


def test_reads_kafka_v0_and_strom_earlier_files() -> None:
    assert MetaProperties.parse("version=0\nbroker.id=3\ncluster.id=c\n") == MetaProperties(0, "c", 3)
    assert MetaProperties.parse("broker.id=3\n") == MetaProperties(0, None, 3)  # version is implicit
    assert MetaProperties.parse(STROM_OLD) == MetaProperties(1, "strom-cluster-0000000001", 1)
    assert MetaProperties.parse(STROM_OLD_WITH_DIR).directory_id == parse_uuid("OTCwX2QhQ8y3dyW7SHz0Kw")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("version=2\nnode.id=1\n", "unknown version '2'"),
        ("version=1\nnode.id=x\ncluster.id=c\n", "Unable to read node.id .* as a base-10 number"),
        ("version=0\nbroker.id=x\n", "Unable to read broker.id"),
        ("version=1\nnode.id=1\ncluster.id=c\ndirectory.id=abc\n", "Unable to read directory.id"),
    ],
)
def test_bad_files(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MetaProperties.parse(text, "d/meta.properties")


def test_written_as_kafka_writes_it(tmp_path: Path) -> None:
    did = parse_uuid("OTCwX2QhQ8y3dyW7SHz0Kw")
    meta = MetaProperties(1, "MkU3OEVBNTcwNTJENDM2Qk", 1, did)
    text = meta.to_text(now=1764064800.0)
    assert text == (
        "#\n#Tue Nov 25 10:00:00 UTC 2025\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
        "directory.id=OTCwX2QhQ8y3dyW7SHz0Kw\nnode.id=1\nversion=1\n"
    )
    write_meta_properties(tmp_path / META_FILE, meta)
    assert read_meta_properties(tmp_path / META_FILE) == meta
    assert read_meta_properties(tmp_path / "nothing") is None
    assert MetaProperties(0, None, 3).to_text().endswith("broker.id=3\nversion=0\n")


def test_uuids() -> None:
    u = uuid.UUID("0123456789abcdef0123456789abcdef")
    assert parse_uuid(format_uuid(u)) == u and len(format_uuid(u)) == 22
    with pytest.raises(ValueError, match="too long"):
        parse_uuid("A" * 30)
    with pytest.raises(ValueError, match="decoded as 12 bytes"):
        parse_uuid("AAAAAAAAAAAAAAAA")
    for _ in range(200):
        text = random_uuid()
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", text) and not text.startswith("-")
    # reserved ids (the first 100) and ones whose text starts with '-' are skipped
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))
    assert format_uuid(dash).startswith("-")
    it = iter([uuid.UUID(int=0), uuid.UUID(int=5), dash, uuid.UUID(int=1 << 64)])
    assert random_uuid(lambda: next(it)) == format_uuid(uuid.UUID(int=1 << 64))


# ------------------------------------------------------------------ load_meta


def test_strom_earlier_files_still_start(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / META_FILE).write_text(STROM_OLD_WITH_DIR)
    (b / META_FILE).write_text(STROM_OLD)  # written before directory.id existed
    meta = load_meta([a, b], 1, "config-default", lambda: uuid.UUID(int=1 << 70))
    assert meta.cluster_id == "strom-cluster-0000000001"
    assert (a / META_FILE).read_text() == STROM_OLD_WITH_DIR  # complete: left as it is
    rewritten = read_meta_properties(b / META_FILE)
    assert rewritten == MetaProperties(1, "strom-cluster-0000000001", 1, uuid.UUID(int=1 << 70))
    assert (b / META_FILE).read_text().startswith("#\n#")  # now in Kafka's layout
    assert meta.directory_ids == {a: parse_uuid("OTCwX2QhQ8y3dyW7SHz0Kw"), b: uuid.UUID(int=1 << 70)}


def test_require_formatted_refuses_unformatted_dirs_and_creates_nothing(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with pytest.raises(ConfigError, match=r"No meta.properties found in .*a .*strom storage format"):
        load_meta([a, b], 1, "c", require_formatted=True)
    assert not a.exists() and not b.exists()
    format_dirs([a], a, 1, "cid")
    before = snapshot(tmp_path)
    b.mkdir()
    with pytest.raises(ConfigError, match=r"No meta.properties found in .*b.*controller.quorum.voters"):
        load_meta([a, b], 1, "c", require_formatted=True)
    assert snapshot(tmp_path) == before | {"b": None}
    format_dirs([a, b], a, 1, "cid", ignore_formatted=True)
    meta = load_meta([a, b], 1, "c", require_formatted=True)
    assert meta.cluster_id == "cid" and len(set(meta.directory_ids.values())) == 2


def test_refused_start_writes_nothing(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / META_FILE).write_text(STROM_OLD)  # incomplete: would be rewritten by a good start
    (b / META_FILE).write_text("version=1\nnode.id=2\ncluster.id=strom-cluster-0000000001\n")
    (a / "t-0").mkdir()
    (a / "t-0" / "00000000000000000000.log").write_bytes(b"data")
    before = snapshot(tmp_path)
    with pytest.raises(
        ConfigError, match=r"node\.id 1 does not match node\.id 2 stored in .*b/meta.properties"
    ):
        load_meta([a, b], 1, "x")
    assert snapshot(tmp_path) == before
    (b / META_FILE).write_text("version=1\nnode.id=1\ncluster.id=other\n")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match=r"different clusters: cluster\.id strom-cluster-0000000001 in"):
        load_meta([a, b], 1, "x")
    assert snapshot(tmp_path) == before


def test_cluster_id_set_in_the_config_must_match(tmp_path: Path) -> None:
    a = tmp_path / "a"
    load_meta([a], 1, "first")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match=r"cluster\.id second does not match cluster\.id first stored in"):
        load_meta([a], 1, "second", config_cluster_id="second")
    assert snapshot(tmp_path) == before
    assert load_meta([a], 1, "first", config_cluster_id="first").cluster_id == "first"
    assert load_meta([a], 1, "default").cluster_id == "first"  # not set in the config: stored wins


def test_metadata_log_dir(tmp_path: Path) -> None:
    a, m = tmp_path / "a", tmp_path / "m"
    meta = load_meta([a], 1, "c", iter(ids(1 << 65, 1 << 66)).__next__, metadata_dir=m)
    assert meta.directory_ids == {a: uuid.UUID(int=1 << 65)} and meta.metadata_directory_id == uuid.UUID(
        int=1 << 66
    )
    assert read_meta_properties(m / META_FILE) == MetaProperties(1, "c", 1, uuid.UUID(int=1 << 66))
    # metadata.log.dir given as one of log.dirs (another spelling): one file, in the data dir
    meta = load_meta([a], 1, "c", metadata_dir=tmp_path / "x" / ".." / "a")
    assert meta.metadata_directory_id is None and list(meta.directory_ids) == [a]
    (a / "__cluster_metadata-0").mkdir()
    with pytest.raises(ConfigError, match="Found unexpected metadata location in data directory"):
        load_meta([a], 1, "c", metadata_dir=m)
    (a / "__cluster_metadata-0").rmdir()
    (m / META_FILE).write_text("version=7\n")
    with pytest.raises(ConfigError, match=r"metadata\.log\.dir .* is unusable: .*unknown version"):
        load_meta([a], 1, "c", metadata_dir=m)


def test_strict_checks(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    (a / META_FILE).write_text("version=1\nnode.id=1\n")
    with pytest.raises(ConfigError, match=r"cluster\.id was not specified in the v1 file"):
        load_meta([a], 1, "c", require_formatted=True)
    (a / META_FILE).write_text("version=1\ncluster.id=c\n")
    with pytest.raises(ConfigError, match=r"node\.id was not specified in"):
        load_meta([a], 1, "c", require_formatted=True)
    (a / META_FILE).write_text(
        f"version=1\nnode.id=1\ncluster.id=c\ndirectory.id={format_uuid(uuid.UUID(int=2))}\n"
    )
    with pytest.raises(ConfigError, match=r"Invalid reserved directory\.id"):
        load_meta([a], 1, "c")


# ------------------------------------------------------------------ format_dirs


def test_format(tmp_path: Path) -> None:
    a, b, m = tmp_path / "a", tmp_path / "b", tmp_path / "m"
    res = format_dirs([b, a], m, 3, "cid")
    assert res.formatted == [a, b, m]  # sorted, as Kafka's TreeSet
    assert res.messages == [
        f"Formatting data directory {a} with cluster.id cid and node.id 3.",
        f"Formatting data directory {b} with cluster.id cid and node.id 3.",
        f"Formatting metadata directory {m} with cluster.id cid and node.id 3.",
    ]
    metas = [read_meta_properties(d / META_FILE) for d in (a, b, m)]
    assert {(x.version, x.cluster_id, x.node_id) for x in metas if x} == {(1, "cid", 3)}
    assert len({x.directory_id for x in metas if x}) == 3
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match=f"Log directory {a} is already formatted. Use --ignore-formatted"):
        format_dirs([a, b], m, 3, "cid")
    assert format_dirs([a, b], m, 3, "cid", ignore_formatted=True).messages == [
        "All of the log directories are already formatted."
    ]
    with pytest.raises(ConfigError, match=r"cluster\.id other does not match cluster\.id cid"):
        format_dirs([a, b, tmp_path / "c"], m, 3, "other", ignore_formatted=True)
    with pytest.raises(ConfigError, match=r"node\.id 4 does not match node\.id 3"):
        format_dirs([a, b, tmp_path / "c"], m, 4, "cid", ignore_formatted=True)
    assert snapshot(tmp_path) == before
    res = format_dirs([a, b, tmp_path / "c"], m, 3, "cid", ignore_formatted=True)
    assert res.formatted == [tmp_path / "c"]
    with pytest.raises(ConfigError, match="You must specify the cluster id"):
        format_dirs([a], a, 3, "")
    with pytest.raises(ConfigError, match="non-negative node ID"):
        format_dirs([a], a, -1, "cid")
