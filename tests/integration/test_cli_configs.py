"""``strom configs``, ``strom topics alter``, ``strom records delete`` and ``strom dump-log`` as
subprocesses against a real strom broker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

STROM = shutil.which("strom", path=str(Path(sys.executable).parent)) or "strom"


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("cli-configs") / "data", overrides=["log.retention.hours=100"])
    b.start()
    try:
        yield b
    finally:
        b.stop()


def strom(b: BrokerProcess | None, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [STROM, *argv]
    if b is not None:
        cmd += ["--bootstrap-server", b.bootstrap]
    return subprocess.run(cmd, capture_output=True, text=True, input=stdin, timeout=60)


def topic(b: BrokerProcess, partitions: int = 1) -> str:
    name = f"clicfg-{uuid.uuid4().hex[:8]}"
    r = strom(b, "topics", "create", "--topic", name, "--partitions", str(partitions))
    assert r.returncode == 0, r.stderr
    return name


def test_configs_topic_round_trip(cli_broker: BrokerProcess) -> None:
    t = topic(cli_broker)
    r = strom(
        cli_broker, "configs", "--alter", "--entity-type", "topics", "--entity-name", t,
        "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"Completed updating config for topic {t}.\n"
    r = strom(cli_broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", t)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Dynamic configs for topic {t} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy="
        "compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "STATIC_BROKER_CONFIG:log.retention.hours=100, DEFAULT_CONFIG:log.retention.hours=168}",
    ]
    r = strom(cli_broker, "configs", "alter", "--topic", t, "--delete-config", "retention.ms")
    assert r.returncode == 0, r.stderr
    r = strom(cli_broker, "configs", "describe", "--topic", t, "--all")
    lines = r.stdout.splitlines()
    assert lines[0] == f"All configs for topic {t} are:"
    assert any(line.startswith(f"  retention.ms={100 * 3600 * 1000} ") for line in lines)
    assert len(lines) > 10
    # kafka-topics.sh --describe shows the override too
    r = strom(cli_broker, "topics", "describe", "--topic", t)
    assert "Configs: cleanup.policy=compact,delete" in r.stdout


def test_configs_errors(cli_broker: BrokerProcess) -> None:
    t = topic(cli_broker)
    r = strom(cli_broker, "configs", "alter", "--topic", t, "--add-config", "retention.ms=soon")
    assert r.returncode == 1
    assert "INVALID_CONFIG" in r.stderr and "retention.ms" in r.stderr
    r = strom(cli_broker, "configs", "alter", "--topic", t, "--add-config", "bogus.name=1")
    assert r.returncode == 1 and "Unknown topic config name: bogus.name" in r.stderr
    r = strom(cli_broker, "configs", "describe", "--topic", "no-such-topic-cli")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = strom(cli_broker, "configs", "alter", "--broker", "1", "--add-config", "listeners=PLAINTEXT://x:1")
    assert r.returncode == 1 and "Cannot update these configs dynamically: listeners" in r.stderr
    r = strom(cli_broker, "configs", "alter", "--topic", t)
    assert r.returncode == 2


def test_configs_broker_default_and_per_broker(cli_broker: BrokerProcess) -> None:
    r = strom(
        cli_broker, "configs", "alter", "--entity-type", "brokers", "--entity-default",
        "--add-config", "log.retention.ms=5000",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Completed updating default config for brokers in the cluster.\n"
    try:
        r = strom(cli_broker, "configs", "describe", "--entity-type", "brokers", "--entity-default")
        assert r.stdout.splitlines() == [
            "Default configs for brokers in the cluster are:",
            "  log.retention.ms=5000 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5000}",
        ]
        r = strom(cli_broker, "configs", "alter", "--broker", "1", "--add-config", "log.retention.ms=6000")
        assert r.stdout == "Completed updating config for broker 1.\n"
        r = strom(cli_broker, "configs", "describe", "--entity-type", "brokers", "--entity-name", "1")
        assert r.stdout.splitlines() == [
            "Dynamic configs for broker 1 are:",
            "  log.retention.ms=6000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=6000, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=5000}",
        ]
        t = topic(cli_broker)
        r = strom(cli_broker, "configs", "describe", "--topic", t, "--all")
        assert any(line.startswith("  retention.ms=6000 ") for line in r.stdout.splitlines())
        r = strom(cli_broker, "configs", "describe", "--entity-type", "brokers")  # every broker + default
        assert "Dynamic configs for broker 1 are:" in r.stdout
        assert "Default configs for brokers in the cluster are:" in r.stdout
    finally:
        strom(cli_broker, "configs", "alter", "--broker", "1", "--delete-config", "log.retention.ms")
        strom(cli_broker, "configs", "alter", "--broker-defaults", "--delete-config", "log.retention.ms")
    r = strom(cli_broker, "configs", "describe", "--broker-defaults")
    assert r.stdout == "Default configs for brokers in the cluster are:\n"


def test_topics_alter_partitions(cli_broker: BrokerProcess) -> None:
    t = topic(cli_broker)
    r = strom(cli_broker, "topics", "alter", "--topic", t, "--partitions", "3")
    assert r.returncode == 0, r.stderr
    r = strom(cli_broker, "topics", "describe", "--topic", t)
    assert "PartitionCount: 3" in r.stdout
    r = strom(cli_broker, "topics", "--alter", "--topic", t, "--partitions", "2")
    assert r.returncode == 1 and "INVALID_PARTITIONS" in r.stderr
    r = strom(cli_broker, "topics", "alter", "--topic", "no-such-cli-topic", "--partitions", "2")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = strom(
        cli_broker, "topics", "alter", "--topic", "no-such-cli-topic", "--partitions", "2", "--if-exists"
    )
    assert r.returncode == 0


def test_records_delete(cli_broker: BrokerProcess, tmp_path: Path) -> None:
    t = topic(cli_broker)
    r = strom(cli_broker, "produce", "--topic", t, stdin="a\nb\nc\nd\n")
    assert r.returncode == 0, r.stderr
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": t, "partition": 0, "offset": 2}], "version": 1}))
    r = strom(cli_broker, "records", "delete", "--offset-json-file", str(spec))
    if "UNSUPPORTED_VERSION" in r.stderr:
        pytest.skip("the broker has no DeleteRecords handler yet")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {t}-0\tlow_watermark: 2",
    ]
    r = strom(
        cli_broker, "consume", "--topic", t, "--from-beginning", "--max-messages", "2", "--timeout-ms", "5000"
    )
    assert r.stdout.splitlines() == ["c", "d"]


def test_dump_log_on_a_real_segment(cli_broker: BrokerProcess) -> None:
    t = topic(cli_broker)
    r = strom(cli_broker, "produce", "--topic", t, "--property", "parse.key=true", stdin="k1\tv1\nk2\tv2\n")
    assert r.returncode == 0, r.stderr
    seg = cli_broker.data_dir / f"{t}-0" / "00000000000000000000.log"
    r = strom(None, "dump-log", "--print-data-log", str(seg))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Dumping {seg}\nLog starting offset: 0\n")
    assert "baseOffset: 0 lastOffset: 1 count: 2" in r.stdout
    assert "isvalid: true" in r.stdout
    assert "| offset: 1 CreateTime:" in r.stdout and "key: k2 payload: v2" in r.stdout
    r = strom(
        None, "dump-log", "--index-sanity-check", "--files",
        f"{seg.with_suffix('.index')},{seg.with_suffix('.timeindex')}",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "passed sanity check." in r.stdout
    r = strom(None, "dump-log", str(seg.with_name("missing.log")))
    assert r.returncode == 1
