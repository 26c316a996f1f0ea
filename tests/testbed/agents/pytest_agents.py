"""Fixtures for the simulated GPU Operator node agents (see docs/DEVELOPING.md)."""
