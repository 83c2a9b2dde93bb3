"""Spiders: ``site`` (generic site crawler, one Page per HTML page)."""
