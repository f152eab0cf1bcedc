"""``python -m benchmarks``: the kernel suite (see :mod:`benchmarks.suite`)."""

import sys

from benchmarks.suite import main

sys.exit(main())
