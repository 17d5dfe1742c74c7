"""The build stage of the factory (see docs/layout.md)."""
