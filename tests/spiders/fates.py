"""``fates``: a scrapy-redis ``RedisSpider`` as its users write one, for the scrapy-redis fates
tests (``tests/test_scrapy_redis_fates.py``): a ``make_request_from_data`` of its own (a payload of
several URLs separated by spaces makes a request each, marked ``made_by``; one starting with
``boom`` raises; ``skip`` makes none, on purpose), a ``redis_key_check_interval`` of an hour
(scrapy-redis master's; not read here), and a ``parse`` that asks for its own page again (a
duplicate, for ``DUPEFILTER_DEBUG``)."""

import json

from scrapy import Request
from scrapy_redis.spiders import RedisSpider


def serialize_item(item) -> str:
    """``REDIS_ITEMS_SERIALIZER`` for scrapy-redis's ``RedisPipeline``: JSON, marked as its own."""
    return "fates-serializer:" + json.dumps(dict(item), sort_keys=True)


class FatesSpider(RedisSpider):
    name = "fates"
    redis_key_check_interval = 3600

    def make_request_from_data(self, data):
        text = data.decode(self.redis_encoding)
        if text.startswith("boom"):
            raise ValueError("a payload this spider cannot make a request of")
        if text == "skip":
            return None
        return [Request(url, callback=self.parse, meta={"made_by": "fates"}) for url in text.split()]

    def parse(self, response):
        yield {"url": response.url, "made_by": response.meta.get("made_by")}
        yield Request(response.url, callback=self.parse)  # already seen: filtered
