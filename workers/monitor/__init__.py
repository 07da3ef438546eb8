"""The stall monitor (SPEC §7b): stuck runs diagnosed and posted without anyone asking."""
