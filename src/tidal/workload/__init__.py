"""Workloads: synthetic generators and real-trace replay, producing columnar request sets."""
