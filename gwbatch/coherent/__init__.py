"""Coherent multi-detector post-processing (ALGORITHMS.md §3; Chu 2017; seed 000 §III).

- :mod:`.sky`: HEALPix nested sky grids.
- :mod:`.network`: per-direction arrival delays and the response basis ``U`` from the SVD of
  ``[sigma F+, sigma F x]``.
- :mod:`.statistic`: coherent and null SNR per direction, the maximum over the sky for each
  candidate and time-shifted trial (numba twin; CUDA in :mod:`._cuda`), full-sky maps.
- :mod:`.skymap`: posterior over the grid, credible areas, the P-P test.
- :mod:`.stage`: zero lag and trials of candidates to events with chi-squared and rank.
- :mod:`.chunk`: one chunk's detectors to clustered events, skymaps and trial livetimes.
"""
