"""Item pipelines, in order: validation (100), Redis write-through cache (200), storage (300)."""
