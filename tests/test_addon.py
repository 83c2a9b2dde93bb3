"""The add-on wires scrapy-frontier into any project: components, switches, the user's own
settings winning, Scrapy's built-ins replaced in place, REDIS_URL from the environment."""

from __future__ import annotations

import pytest
import scrapy
from scrapy.utils.misc import load_object
from scrapy.utils.test import get_crawler

ADDON = {"scrapy_frontier.addon.DistributedAddon": 0}


class Spider(scrapy.Spider):
    name = "addon"


def crawler_settings(settings: dict | None = None):
    crawler = get_crawler(Spider, {"ADDONS": ADDON, **(settings or {})})
    return crawler.settings


def components(settings, name: str) -> dict[str, object]:
    """The effective component dictionary (with its _BASE), as import paths."""
    out: dict[str, object] = {}
    for key, value in settings.getwithbase(name).items():
        cls = load_object(key) if isinstance(key, str) else key
        out[f"{cls.__module__}.{cls.__qualname__}"] = value
    return out


@pytest.fixture(autouse=True)
def no_environment(monkeypatch):
    for name in ("REDIS_URL", "MYSQL_URL", "LOG_JSON", "METRICS_ENABLED", "METRICS_HOST", "METRICS_PORT"):
        monkeypatch.delenv(name, raising=False)


def test_every_component_is_wired_in_a_bare_project():
    settings = crawler_settings()
    mw = components(settings, "DOWNLOADER_MIDDLEWARES")
    assert mw["scrapy.downloadermiddlewares.retry.RetryMiddleware"] is None
    assert mw["scrapy_frontier.downloadermiddlewares.retry.BackoffRetryMiddleware"] == 550  # Scrapy's slot
    assert mw["scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware"] is None
    assert mw["scrapy_frontier.downloadermiddlewares.robotstxt.SharedRobotsTxtMiddleware"] == 100
    assert mw["scrapy_frontier.downloadermiddlewares.politeness.SharedPolitenessMiddleware"] == 960
    assert components(settings, "ITEM_PIPELINES") == {
        "scrapy_frontier.pipelines.validation.ValidationPipeline": 100,
        "scrapy_frontier.pipelines.cache.RedisCachePipeline": 200,
        "scrapy_frontier.pipelines.storage.StoragePipeline": 300,
    }
    ext = components(settings, "EXTENSIONS")
    assert ext["scrapy.extensions.logstats.LogStats"] is None
    assert ext["scrapy_frontier.observability.logstats.ClusterLogStats"] == 0
    assert ext["scrapy_frontier.observability.extension.Observability"] == 0
    assert ext["scrapy_frontier.gcfreeze.GcFreeze"] == 0
    assert settings["LOG_FORMATTER"] == "scrapy_frontier.observability.logformatter.LogFormatter"
    # embedded mode: Scrapy's scheduler and dupefilter
    assert settings["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    assert settings["DUPEFILTER_CLASS"] == "scrapy.dupefilters.RFPDupeFilter"
    # defaults of the settings it adds are in the crawl's settings
    assert (
        settings.getint("REDIS_START_URLS_MAX_BYTES") == 65536
        and settings.getpriority("REDIS_START_URLS_MAX_BYTES") == 0
    )


def test_redis_url_from_the_environment_turns_distributed_mode_on(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/13")
    monkeypatch.setenv("MYSQL_URL", "mysql://root@127.0.0.1/test")
    settings = crawler_settings()
    assert (
        settings["REDIS_URL"] == "redis://127.0.0.1:6379/13" and settings["MYSQL_URL"] == "mysql://root@127.0.0.1/test"
    )
    assert settings["SCHEDULER"] == "scrapy_frontier.scheduler.FrontierScheduler"
    assert settings["DUPEFILTER_CLASS"] == "scrapy.dupefilters.BaseDupeFilter"


def test_a_setting_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/13")
    assert crawler_settings({"REDIS_URL": "redis://127.0.0.1:6379/12"})["REDIS_URL"] == "redis://127.0.0.1:6379/12"


def test_the_users_own_settings_win():
    settings = crawler_settings(
        {
            "REDIS_URL": "redis://127.0.0.1:6379/13",
            "SCHEDULER": "scrapy.core.scheduler.Scheduler",
            "ITEM_PIPELINES": {
                "scrapy_frontier.pipelines.storage.StoragePipeline": 900,
                "scrapy_frontier.pipelines.cache.RedisCachePipeline": None,
            },
            "DOWNLOADER_MIDDLEWARES": {
                "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
                "scrapy.downloadermiddlewares.retry.RetryMiddleware": 600,
            },
            "LOG_FORMATTER": "scrapy.logformatter.LogFormatter",
        }
    )
    assert settings["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"  # the project's own choice
    pipelines = components(settings, "ITEM_PIPELINES")
    assert pipelines["scrapy_frontier.pipelines.storage.StoragePipeline"] == 900
    assert pipelines["scrapy_frontier.pipelines.cache.RedisCachePipeline"] is None
    mw = components(settings, "DOWNLOADER_MIDDLEWARES")
    # robots.txt disabled by the project: nothing replaces it
    assert "scrapy_frontier.downloadermiddlewares.robotstxt.SharedRobotsTxtMiddleware" not in mw
    # Scrapy's retry moved by the project: ours takes that position
    assert mw["scrapy_frontier.downloadermiddlewares.retry.BackoffRetryMiddleware"] == 600
    assert mw["scrapy.downloadermiddlewares.retry.RetryMiddleware"] is None
    assert settings["LOG_FORMATTER"] == "scrapy.logformatter.LogFormatter"


def test_a_scrapy_redis_scheduler_left_in_the_settings_is_replaced(caplog):
    caplog.set_level("INFO", logger="scrapy_frontier.addon")
    settings = crawler_settings(
        {
            "REDIS_URL": "redis://127.0.0.1:6379/13",
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        }
    )
    assert settings["SCHEDULER"] == "scrapy_frontier.scheduler.FrontierScheduler"
    assert settings["DUPEFILTER_CLASS"] == "scrapy.dupefilters.BaseDupeFilter"
    assert "scrapy_redis.scheduler.Scheduler replaced" in caplog.text


def test_the_project_settings_hold_project_values_only():
    import crawler.settings as project

    assert project.ADDONS == ADDON
    for name in ("ITEM_PIPELINES", "DOWNLOADER_MIDDLEWARES", "EXTENSIONS", "LOG_FORMATTER", "REDIS_URL", "MYSQL_URL"):
        assert not hasattr(project, name), name
