"""Benchmarks (``make bench``): each prints its figures as ratios against a baseline measured in
the same run.  Never part of ``make test``."""
