"""A JSON serializer for scrapy-redis's queue (``SCHEDULER_SERIALIZER = "tests.scrapy_redis_json"``),
as a project that does not want pickle writes one: ``Request.to_dict()`` holds bytes (the body,
the headers' names and values), which JSON has no type for, so they are tagged."""

import json


def _encode(value):
    if isinstance(value, bytes):
        return {"__bytes__": value.decode("latin-1")}
    if isinstance(value, dict):
        return {"__dict__": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value):
    if isinstance(value, dict):
        if "__bytes__" in value:
            return value["__bytes__"].encode("latin-1")
        return {_decode(k): _decode(v) for k, v in value["__dict__"]}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def dumps(obj):
    return json.dumps(_encode(obj))


def loads(data):
    return _decode(json.loads(data))
