"""``python -m gwbatch``: the same CLI as the ``gwbatch`` console script."""

import sys

from workflow.cli import main

# The guard matters: Dask's worker processes are spawned and re-import the main module.
if __name__ == "__main__":
    sys.exit(main())
