"""The seeds stage of the factory (see docs/layout.md)."""
