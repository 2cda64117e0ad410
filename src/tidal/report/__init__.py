"""Results on disk (Parquet + JSON), tables and plots."""
