"""Single-pulse boxcar search (Adámek & Armour; ALGORITHMS.md §5)."""
