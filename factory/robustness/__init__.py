"""The robustness stage of the factory (see docs/layout.md)."""
