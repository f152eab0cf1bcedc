"""SPIIR: template banks as sums of first-order complex IIR filters (ALGORITHMS.md §2)."""
