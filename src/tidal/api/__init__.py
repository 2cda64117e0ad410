"""The OpenAI-compatible HTTP server (``serve`` extra: FastAPI, uvicorn, prometheus-client)."""
