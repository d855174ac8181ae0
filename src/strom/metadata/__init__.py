"""Cluster metadata: topics, their ids, partition counts and configs (single node for now)."""
