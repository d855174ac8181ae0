"""The topic registry: which topics exist, their ids, partition counts and config overrides.

Persisted as one JSON document in the log dir, replaced atomically (write temp, fsync, rename,
fsync dir) so a crash leaves either the old or the new registry. A later issue replaces this
with a Raft-replicated metadata log; the registry's interface is what the broker uses.

Error contract: :class:`TopicError` carrying a Kafka error code for invalid names, duplicates,
unknown topics and invalid partition counts.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..durable_file import replace_file
from ..protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


class TopicError(KafkaError):
    pass


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: non-empty, not '.'/'..', ≤249 chars, [a-zA-Z0-9._-]."""
    if not name:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters",
        )
    if not _LEGAL.match(name):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'",
        )


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": self.configs,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicInfo:
        return cls(d["name"], uuid.UUID(d["id"]), int(d["partitions"]), dict(d.get("configs", {})))


class TopicRegistry:
    FILE = "strom-topics.json"

    def __init__(
        self, log_dir: Path, new_id: Callable[[], uuid.UUID] = uuid.uuid4, *, persist: bool = True
    ) -> None:
        """``persist=False``: kept in memory only (on the metadata quorum, the metadata log is
        the store and this registry is the broker's view of its image)."""
        self.path = log_dir / self.FILE
        self.persist = persist
        # told of config changes made through set_configs (the broker on the quorum writes them
        # to the metadata log)
        self.on_set_configs: Callable[[str, dict[str, str]], None] | None = None
        self._new_id = new_id
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}
        # bumped whenever a topic is created or deleted (in memory only): consumer groups
        # subscribed by regular expression resolve them again when it moved
        self.version = 0
        if persist and self.path.exists():
            doc = json.loads(self.path.read_text())
            for t in doc.get("topics", []):
                info = TopicInfo.from_json(t)
                self.topics[info.name] = info
                self.by_id[info.topic_id] = info

    def _save(self) -> None:
        if not self.persist:
            return
        data = json.dumps({"version": 1, "topics": [t.to_json() for t in self.topics.values()]}, indent=1)
        replace_file(self.path, data.encode())

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def create(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions < 1:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        info = TopicInfo(name, topic_id or self._new_id(), partitions, dict(configs or {}))
        self.topics[name] = info
        self.by_id[info.topic_id] = info
        try:
            self._save()
        except BaseException:  # not saved (a full disk): not created, in memory either
            del self.topics[name]
            del self.by_id[info.topic_id]
            raise
        self.version += 1
        return info

    def delete(self, name: str) -> TopicInfo:
        info = self.topics.pop(name, None)
        if info is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        self.by_id.pop(info.topic_id, None)
        self.version += 1
        self._save()
        return info

    def set_partitions(self, name: str, partitions: int) -> None:
        info = self.topics[name]
        old, info.partitions = info.partitions, partitions
        try:
            self._save()
        except BaseException:  # not saved: unchanged
            info.partitions = old
            raise

    def set_configs(self, name: str, configs: dict[str, str], notify: bool = True) -> None:
        info = self.topics[name]
        if notify and self.on_set_configs is not None:
            self.on_set_configs(name, dict(configs))
        old, info.configs = info.configs, dict(configs)
        try:
            self._save()
        except BaseException:  # not saved: unchanged
            info.configs = old
            raise
