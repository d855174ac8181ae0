"""``strom console``: the web console (:mod:`strom.console.app`)."""
