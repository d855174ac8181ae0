"""``strom sql``: ksqlDB's statements over strom topics, run as Spark SQL (see :mod:`.engine`);
the parser (:mod:`.parser`) needs no Spark."""
