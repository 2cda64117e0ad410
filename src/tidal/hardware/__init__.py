"""GPU and model catalogs and the per-step performance models."""
