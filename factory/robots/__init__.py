"""The robots stage of the factory (see docs/layout.md)."""
