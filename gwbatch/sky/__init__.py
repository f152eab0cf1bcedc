"""Sky geometry shared by every search that localises: the coherent SPIIR stage, the burst sky
loop, the candidate tables and the report.

- :mod:`.grid`: HEALPix nested sky grids, pixels of directions, angular distances.
- :mod:`.network`: a detector network's arrival delays and antenna patterns over a grid.
- :mod:`.skymap`: posteriors over the grid, credible areas and levels, the P-P test.
"""
