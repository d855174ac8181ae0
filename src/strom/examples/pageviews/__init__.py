"""KSQL's page views example for ``strom sql`` (``pageviews.sql``) and its data generator
(``python -m strom.examples.pageviews produce``)."""
