"""Fixtures for the testbed cluster (see docs/DEVELOPING.md)."""
