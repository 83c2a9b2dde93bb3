"""The distributed parts: Redis connection, key names, the shared frontier and its scheduler."""
