"""Bottom-layer helpers every package may use (typed config loading). Imports nothing of ratchet."""
