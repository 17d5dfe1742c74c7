"""The simulation stage of the factory (see docs/layout.md)."""
