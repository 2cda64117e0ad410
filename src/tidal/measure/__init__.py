"""Measuring a live OpenAI-compatible server (``tidal bench serve``): datasets, the streaming
client, the arrival schedule and the results in the simulator's layout."""
