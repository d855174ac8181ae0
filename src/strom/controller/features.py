"""Finalized feature levels: Kafka's ``FeatureControlManager``.

Replicated state: ``name -> level`` from ``FeatureLevelRecord`` (level 0 removes the feature).
A new cluster's first records (:func:`bootstrap_records`) finalize ``metadata.version``,
``kraft.version``, ``transaction.version`` and ``group.version`` at the levels strom speaks; a
registering broker must support every finalized level (checked by the cluster manager).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..metadata.records import FeatureLevelRecord

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"

# Kafka 4.0's production levels: metadata.version 4.0-IV3 (25), KRaft with KIP-853 (1),
# transactions v2 / KIP-890 (2), the consumer rebalance protocol / KIP-848 (1).
BOOTSTRAP_LEVELS: Mapping[str, int] = {
    METADATA_VERSION: 25,
    KRAFT_VERSION: 1,
    TRANSACTION_VERSION: 2,
    GROUP_VERSION: 1,
}


def bootstrap_records(levels: Mapping[str, int] = BOOTSTRAP_LEVELS) -> list[FeatureLevelRecord]:
    return [FeatureLevelRecord(name=name, feature_level=level) for name, level in levels.items()]


class FeatureControlManager:
    def __init__(self) -> None:
        self.finalized: dict[str, int] = {}

    def level(self, name: str) -> int:
        return self.finalized.get(name, 0)

    def replay(self, record: FeatureLevelRecord) -> None:
        if record.feature_level == 0:
            self.finalized.pop(record.name, None)
        else:
            self.finalized[record.name] = record.feature_level

    def to_records(self) -> list[FeatureLevelRecord]:
        return [FeatureLevelRecord(name=n, feature_level=v) for n, v in sorted(self.finalized.items())]
