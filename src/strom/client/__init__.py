"""A small asyncio Kafka client on kio: connection with version negotiation and pipelining,
metadata, topic admin, list offsets, produce and fetch. Works with any Kafka-compatible broker."""

from strom.client.client import (
    EARLIEST,
    LATEST,
    BrokerMetadata,
    Client,
    ClusterMetadata,
    FetchResult,
    PartitionMetadata,
    ProduceInput,
    TopicMetadata,
    parse_bootstrap,
)
from strom.client.connection import KafkaConnection
from strom.client.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaProtocolError,
    KafkaTimeoutError,
    error_name,
)
from strom.client.security import SecurityConfig, SecurityConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerMetadata",
    "Client",
    "ClusterMetadata",
    "FetchResult",
    "KafkaConnection",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaProtocolError",
    "KafkaTimeoutError",
    "PartitionMetadata",
    "ProduceInput",
    "SecurityConfig",
    "SecurityConfigError",
    "TopicMetadata",
    "error_name",
    "parse_bootstrap",
]
