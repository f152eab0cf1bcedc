"""gwbatch benchmarks: ``python -m benchmarks`` runs the kernel suite (:mod:`benchmarks.suite`)."""
