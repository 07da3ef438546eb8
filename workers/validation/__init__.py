"""Layer 3 before submitting: `/tau validate` and `taubot validate` (SPEC §4 layer 3)."""
