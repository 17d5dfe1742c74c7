"""The cli stage of the factory (see docs/layout.md)."""
