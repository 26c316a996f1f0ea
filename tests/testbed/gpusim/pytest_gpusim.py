"""Fixtures for simulated NVML hosts (see docs/DEVELOPING.md)."""
