"""Everything that touches files: the Zarr strain store, GWOSC/SIGPROC ingest, result tables."""
