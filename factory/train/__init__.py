"""The train stage of the factory (see docs/layout.md)."""
