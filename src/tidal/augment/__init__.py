"""Augmented requests in the engine: pause on an external call, Preserve/Discard/Swap the KV
context while it runs, resume with the returned tokens (INFERCEPT), and AugServe's value-based
ordering and dynamic token budget. Policies are registry entries (``INTERCEPTS``,
``TOKEN_BUDGETS``, ``PREDICTORS``, ``AUGMENT_ORDERINGS``); ``SERVING_POLICIES`` bundles
them under the names of the systems compared (``vllm``, ``infercept``, ``augserve``)."""
