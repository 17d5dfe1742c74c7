"""The specs stage of the factory (see docs/layout.md)."""
