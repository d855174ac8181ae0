"""strom.streams: Kafka Streams capabilities over strom topics."""
