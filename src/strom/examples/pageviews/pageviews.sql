-- KSQL's page views example on strom sql: page views (a stream keyed by user) joined with the
-- users table, counted per region in tumbling 30-second windows.
--   python -m strom.examples.pageviews produce --bootstrap-server HOST:PORT
--   strom sql --bootstrap-server HOST:PORT --file src/strom/examples/pageviews/pageviews.sql
SET 'auto.offset.reset' = 'earliest';

CREATE STREAM pageviews (viewtime BIGINT, userid VARCHAR KEY, pageid VARCHAR)
  WITH (kafka_topic = 'pageviews', value_format = 'JSON', timestamp = 'viewtime');

CREATE TABLE users (userid VARCHAR PRIMARY KEY, registertime BIGINT, gender VARCHAR, regionid VARCHAR)
  WITH (kafka_topic = 'users', value_format = 'JSON');

-- each view with its user's region (the user as of the view: strom.streams' stream-table join)
CREATE STREAM pageviews_enriched AS
  SELECT pv.userid AS userid, pv.viewtime AS viewtime, pageid, regionid, gender
  FROM pageviews pv LEFT JOIN users u ON pv.userid = u.userid
  EMIT CHANGES;

-- views per region every 30 seconds (a windowed table: keys {"end","key","start"})
CREATE TABLE pageviews_per_region AS
  SELECT regionid, COUNT(*) AS numviews, WINDOWSTART AS window_start, WINDOWEND AS window_end
  FROM pageviews pv LEFT JOIN users u ON pv.userid = u.userid
  WINDOW TUMBLING (SIZE 30 SECONDS)
  GROUP BY regionid
  EMIT CHANGES;
