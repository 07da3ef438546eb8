"""Text from outside taubot: strip → redact → (at render) escape, and the log-safety filter."""
