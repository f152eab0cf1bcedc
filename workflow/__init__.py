"""Orchestration: campaign plan, cluster creation, Dask execution, checkpoints and the CLI.

The only package that imports dask, distributed or dask_cuda.
"""
