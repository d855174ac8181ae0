"""The warehouse ledger: an append-only ledger of stock movements on strom, views of it kept by a
Spark Structured Streaming job, and an HTTP service answering questions from those views.

* :mod:`.model`     records, views, the reference projection and the answers (pure Python)
* :mod:`.generator` a realistic, deterministic ledger with storno corrections
* :mod:`.producer`  idempotent writes of movements and master data
* :mod:`.book`      booking by hand: a movement, a transfer, a storno (validated, transactional)
* :mod:`.job`       the Spark job (strom source -> stateful aggregations -> exactly-once strom sink)
* :mod:`.service`   interactive queries over the compacted view topics
* :mod:`.cli`       ``strom-ledger item|cell|book|transfer|storno|generate|run|serve|query``

Quick start (a broker on 127.0.0.1:9092)::

    python -m strom.examples.ledger generate --days 5
    python -m strom.examples.ledger run --checkpoint /tmp/ledger-ck --available-now
    python -m strom.examples.ledger serve --port 8080 &
    python -m strom.examples.ledger query item SKU-0001
"""

from strom.examples.ledger.model import Cell, Item, Movement, Views, project

__all__ = ["Cell", "Item", "Movement", "Views", "project"]
