"""``strom connect``: Kafka Connect's connectors, single-message transforms, converters and
error handling, configured with the JSON (or ``.properties``) a Connect user already has, each
connector running as a Spark Structured Streaming query.

- :mod:`strom.connect.config`: the connector config model and its validation;
- :mod:`strom.connect.data`: Connect's records and schemas (the JSON converter's schema form);
- :mod:`strom.connect.transforms`: the SMTs and predicates under Kafka's class names;
- :mod:`strom.connect.converters`: String, ByteArray, JSON and registry converters;
- :mod:`strom.connect.errors`: ``errors.*`` (tolerance, log, dead letter queue);
- :mod:`strom.connect.pipeline`: a batch of raw records through converters, transforms, errors;
- :mod:`strom.connect.runtime`: the connectors as Spark queries; :mod:`strom.connect.rest` the
  REST API.
"""
