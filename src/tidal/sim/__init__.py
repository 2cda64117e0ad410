"""The simulator backend: a heapq event loop driving the engine scheduler with a latency model."""
