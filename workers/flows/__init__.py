"""Flows: collect → evaluate → render → surface, one module per command or button."""
