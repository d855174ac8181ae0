"""Who is on a connection and what it may do: TLS contexts, SASL authentication, principals."""
