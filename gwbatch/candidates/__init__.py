"""Candidates: friends-of-friends merging, chunk-edge de-duplication, coincidence, tables, injections."""
