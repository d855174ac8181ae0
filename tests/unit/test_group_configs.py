# ruff: noqa: E501  (expected messages keep their natural lengths)
"""Group configs (the GROUP config resource): Kafka's GroupConfig names, defaults, validation
against the broker's group.* bounds, clamping and persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.metadata import group_configs as gc
from strom.metadata.configs import ConfigResourceError
from strom.protocol.errors import ErrorCode

BROKER = {
    "group.share.record.lock.duration.ms": 30000,
    "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000,
    "group.share.delivery.count.limit": 5,
    "group.share.min.delivery.count.limit": 2,
    "group.share.max.delivery.count.limit": 10,
    "group.share.session.timeout.ms": 45000,
    "group.share.min.session.timeout.ms": 45000,
    "group.share.max.session.timeout.ms": 60000,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.min.heartbeat.interval.ms": 5000,
    "group.share.max.heartbeat.interval.ms": 15000,
}


def test_defaults_follow_the_broker() -> None:
    d = gc.defaults({**BROKER, "group.share.delivery.count.limit": 7})
    assert d["share.delivery.count.limit"] == "7"
    assert d["share.record.lock.duration.ms"] == "30000"
    assert d["share.auto.offset.reset"] == "latest"
    assert d["share.isolation.level"] == "read_uncommitted"
    assert d["consumer.session.timeout.ms"] == "45000"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("share.record.lock.duration.ms", "10000",
         "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
        ("share.record.lock.duration.ms", "70000",
         "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
        ("share.record.lock.duration.ms", "999", "Value must be at least 1000"),
        ("share.delivery.count.limit", "11", "must be less than or equal to group.share.max.delivery.count.limit"),
        ("share.auto.offset.reset", "middle", "The value must be either 'earliest', 'latest'"),
        ("share.isolation.level", "dirty", "String must be one of: read_committed, read_uncommitted"),
        ("share.session.timeout.ms", "abc", "Not a number of type INT"),
        ("no.such.config", "1", "Unknown group config name: no.such.config"),
    ],
)
def test_invalid_values(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigResourceError) as e:
        gc.validate(BROKER, {name: value})
    assert e.value.code == ErrorCode.INVALID_CONFIG
    assert message in str(e.value)


def test_session_must_exceed_heartbeat() -> None:
    cfg = {**BROKER, "group.share.min.session.timeout.ms": 1000, "group.share.min.heartbeat.interval.ms": 1000}
    with pytest.raises(ConfigResourceError, match=r"share\.session\.timeout\.ms must be greater than"):
        gc.validate(cfg, {"share.session.timeout.ms": "5000"})


def test_valid_values_are_canonical_and_clamped_when_bounds_move(tmp_path: Path) -> None:
    assert gc.validate(BROKER, {"share.auto.offset.reset": "EARLIEST"}) == {"share.auto.offset.reset": "earliest"}
    out = gc.validate(
        BROKER, {"share.auto.offset.reset": "by_duration:PT1H", "share.record.lock.duration.ms": "20000"}
    )
    assert out == {"share.auto.offset.reset": "by_duration:PT1H", "share.record.lock.duration.ms": "20000"}
    eff = gc.effective({**BROKER, "group.share.min.record.lock.duration.ms": 25000}, out)
    assert eff["share.record.lock.duration.ms"] == "25000"
    store = gc.GroupConfigStore(tmp_path / "g.json")
    store.set("g1", out)
    assert gc.GroupConfigStore(tmp_path / "g.json").get("g1") == out
    store.set("g1", {})
    assert gc.GroupConfigStore(tmp_path / "g.json").get("g1") == {}
