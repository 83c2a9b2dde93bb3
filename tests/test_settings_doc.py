"""docs/settings.md's tables are written from scrapy_frontier/defaults.py, and the table's own
defaults pass its checks. No server needed."""

from __future__ import annotations

import difflib

import pytest
from scrapy.settings import BaseSettings

from scrapy_frontier.config import read_value
from scrapy_frontier.defaults import FROM_ENVIRONMENT, GROUPS, SETTINGS, TABLE, settings_doc
from tests.conftest import ROOT

DOC = ROOT / "docs" / "settings.md"
REGENERATE = ".venv/bin/python -m scrapy_frontier.defaults docs/settings.md"


def test_the_settings_doc_is_what_defaults_py_writes():
    text = DOC.read_text(encoding="utf-8")
    written = settings_doc(text)
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), written.splitlines(keepends=True), "docs/settings.md", "defaults.py"
        )
    )
    assert written == text, (
        f"docs/settings.md's settings tables differ from scrapy_frontier/defaults.py: run `{REGENERATE}` "
        f"(edit the table in defaults.py, not the doc) and commit the result.\n{diff}"
    )


def test_every_setting_is_in_one_group_and_the_addon_defaults_come_from_the_table():
    names = [s.name for group in GROUPS.values() for s in group]
    assert len(names) == len(set(names)) == len(TABLE) == len(SETTINGS)
    assert SETTINGS == {name: s.default for name, s in TABLE.items()}
    assert FROM_ENVIRONMENT == ("REDIS_URL", "MYSQL_URL", "LOG_JSON", "METRICS_ENABLED", "METRICS_HOST", "METRICS_PORT")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_a_default_given_as_a_value_passes_its_own_check(name, monkeypatch):
    monkeypatch.delenv(name, raising=False)
    setting = TABLE[name]
    assert read_value(BaseSettings(), name) == setting.default
    if setting.default is not None and setting.default != "":
        read_value(BaseSettings({name: setting.default}, priority="project"), name)


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("STORAGE_BATCH_SIZE", "abc", "Setting STORAGE_BATCH_SIZE='abc' is not a valid int"),
        ("STORAGE_BATCH_SIZE", "0", "Setting STORAGE_BATCH_SIZE='0' is out of range: it must be >= 1"),
        ("POLITENESS_REFRESH", "0", "Setting POLITENESS_REFRESH='0' is out of range: it must be > 0"),
        (
            "POLITENESS_REFRESH",
            "nan",
            "Setting POLITENESS_REFRESH='nan' is not a valid float: a finite number is needed",
        ),
        (
            "DOMAIN_RATE_LIMIT",
            "inf",
            "Setting DOMAIN_RATE_LIMIT='inf' is not a valid float: a finite number is needed",
        ),
        ("VALIDATION_ENABLED", "maybe", "Setting VALIDATION_ENABLED='maybe' is not a valid bool"),
        ("REDIS_PARAMS", "[1", "Setting REDIS_PARAMS='[1' is not a valid dict"),
    ],
)
def test_a_bad_value_is_refused_with_one_line_naming_the_setting(name, raw, message):
    with pytest.raises(ValueError) as exc:
        read_value(BaseSettings({name: raw}, priority="project"), name)
    assert str(exc.value) == message


def test_an_environment_value_is_read_and_checked_only_for_the_names_that_take_one(monkeypatch):
    monkeypatch.setenv("METRICS_ENABLED", "false")
    monkeypatch.setenv("STORAGE_BATCH_SIZE", "7")
    assert read_value(BaseSettings(), "METRICS_ENABLED") is False
    assert read_value(BaseSettings(), "STORAGE_BATCH_SIZE") == 200
    assert read_value(BaseSettings({"METRICS_ENABLED": "true"}, priority="project"), "METRICS_ENABLED") is True
    monkeypatch.setenv("LOG_JSON", "maybe")
    with pytest.raises(ValueError, match="LOG_JSON"):
        read_value(BaseSettings(), "LOG_JSON")
