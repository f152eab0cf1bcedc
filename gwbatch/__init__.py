"""gwbatch: batch searches of archived multi-detector gravitational-wave strain.

The library: data model, conditioning, kernels, candidates, background and report.  It never
imports Dask; orchestration lives in the ``workflow`` package.
"""

__version__ = "0.1.0"

#: The version of what a chunk computes.  Raised with every change of the code that changes a
#: chunk's tables; ``--resume`` never reuses checkpoints of another analysis version.
ANALYSIS_VERSION = 4
