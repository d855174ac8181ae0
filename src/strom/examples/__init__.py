"""Example applications built on strom (see :mod:`strom.examples.ledger`)."""
