"""strom: Apache Kafka, rebuilt in Python."""

__all__ = ["__version__"]
__version__ = "0.1.0"
