"""A distributed Scrapy crawler: shared Redis frontier, leases, validated items in Redis and MySQL."""
