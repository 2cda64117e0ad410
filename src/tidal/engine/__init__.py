"""One serving instance: waiting-queue ordering, batching policy, KV accounting, step plans."""
