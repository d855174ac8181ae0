"""Observability: the broker's metrics (Prometheus) and its HTTP listener (/metrics, /healthz,
/readyz). See the README's Observability section."""
