"""Word count on ``strom.streams`` (Kafka Streams' WordCountDemo): lines in, counts per word out."""
