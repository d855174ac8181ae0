"""A Confluent-compatible schema registry (``strom schema-registry``), state in ``_schemas``."""
