"""Finalized feature levels: Kafka's ``FeatureControlManager``.

Replicated state: ``name -> level`` from ``FeatureLevelRecord`` (level 0 removes the feature).
A new cluster's first records (:func:`bootstrap_records`) finalize ``metadata.version``,
``kraft.version``, ``transaction.version`` and ``group.version`` at the levels strom speaks; a
registering broker must support every finalized level (checked by the cluster manager).

UpdateFeatures (:meth:`FeatureControlManager.update_features`, Kafka's rules): a level must be
supported by this controller and by every registered broker; going up needs upgrade type UPGRADE,
going down SAFE_DOWNGRADE or UNSAFE_DOWNGRADE; ``metadata.version`` is never lowered (a
downgrade could drop metadata newer versions carry). Refusals are INVALID_UPDATE_VERSION with
Kafka's "Invalid update version V for feature F. ..." message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..metadata.image import BrokerRegistration
from ..metadata.records import FeatureLevelRecord
from ..protocol.errors import ErrorCode, KafkaError

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


# the levels this controller can finalize (KRaft starts at metadata.version 3.3-IV0 = 7)
SUPPORTED_LEVELS: Mapping[str, tuple[int, int]] = {
    METADATA_VERSION: (7, BOOTSTRAP_LEVELS[METADATA_VERSION]),
    KRAFT_VERSION: (0, BOOTSTRAP_LEVELS[KRAFT_VERSION]),
    TRANSACTION_VERSION: (0, BOOTSTRAP_LEVELS[TRANSACTION_VERSION]),
    GROUP_VERSION: (0, BOOTSTRAP_LEVELS[GROUP_VERSION]),
}

# FeatureUpdate.UpgradeType
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def bootstrap_records(levels: Mapping[str, int] = BOOTSTRAP_LEVELS) -> list[FeatureLevelRecord]:
    return [FeatureLevelRecord(name=name, feature_level=level) for name, level in levels.items()]


class FeatureControlManager:
    def __init__(self) -> None:
        self.finalized: dict[str, int] = {}

    def level(self, name: str) -> int:
        return self.finalized.get(name, 0)

    def update_feature(
        self, name: str, level: int, upgrade_type: int, brokers: Iterable[BrokerRegistration]
    ) -> FeatureLevelRecord:
        """The record finalizing ``name`` at ``level``; raises KafkaError (INVALID_UPDATE_VERSION)."""

        def invalid(reason: str) -> KafkaError:
            return KafkaError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"Invalid update version {level} for feature {name}. {reason}",
            )

        if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise invalid("The controller does not support the given upgrade type.")
        if level < 0:
            raise invalid("A feature version cannot be less than 0.")
        supported = SUPPORTED_LEVELS.get(name)
        disabling = level == 0 and name != METADATA_VERSION
        if supported is None or not (disabling or supported[0] <= level <= supported[1]):
            raise invalid("Local controller does not support this feature.")
        for reg in brokers:
            offered = {f.name: f for f in reg.supported_features}.get(name)
            lo, hi = (offered.min_supported_version, offered.max_supported_version) if offered else (0, 0)
            if level != 0 and not lo <= level <= hi:
                raise invalid(f"Broker {reg.id} does not support this feature (it supports {lo}-{hi}).")
        current = self.level(name)
        if level < current:
            if upgrade_type == UPGRADE:
                raise invalid(
                    "Can't downgrade the version of this feature without setting the upgrade type to "
                    "either safe or unsafe downgrade."
                )
            if name == METADATA_VERSION:
                raise invalid(
                    "Refusing to perform the requested downgrade because it might delete metadata "
                    "information."
                )
        elif level > current and upgrade_type != UPGRADE:
            raise invalid("Can't downgrade to a newer version.")
        return FeatureLevelRecord(name=name, feature_level=level)

    def replay(self, record: FeatureLevelRecord) -> None:
        if record.feature_level == 0:
            self.finalized.pop(record.name, None)
        else:
            self.finalized[record.name] = record.feature_level

    def to_records(self) -> list[FeatureLevelRecord]:
        return [FeatureLevelRecord(name=n, feature_level=v) for n, v in sorted(self.finalized.items())]
