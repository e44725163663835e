"""ISO 8601 text as moments: what reads as a date, in which time zone, and back."""

import pytest

from reranker.core.errors import ConfigError
from reranker.core.times import epoch_millis, iso_text, parse_time


@pytest.mark.parametrize("text, millis", [
    ("1970-01-01", 0.0),
    ("2010-01-01", 1262304000000.0),
    ("2010-01-01T00:00:01Z", 1262304001000.0),
    ("2010-01-01 00:00:01", 1262304001000.0),  # UTC when no offset is given
    ("2010-01-01T02:00:00+02:00", 1262304000000.0),
    ("2010-01-01T02:00:00+0200", 1262304000000.0),
    ("2010-01-01T00:00:00.250z", 1262304000250.0),
])
def test_iso_dates_and_times_read_as_epoch_milliseconds(text, millis):
    assert epoch_millis(text) == millis


@pytest.mark.parametrize("value", ["2010-13-01", "2010-02-30", "20100101", "2010-01",
                                   "2010-01-01T25:00", "last year", "1262304000000", "",
                                   " 2010-01-01", 1262304000000, None, True])
def test_what_is_not_iso_8601_text_is_no_date(value):
    assert epoch_millis(value) is None


def test_moments_print_back_as_iso_text():
    assert iso_text(1262304000000.0) == "2010-01-01"  # midnight: the date alone
    assert iso_text(1330857000000.0) == "2012-03-04T10:30:00Z"
    assert iso_text(1262304000250.0) == "2010-01-01T00:00:00.250Z"
    for text in ("2024-02-29", "2012-03-04T10:30:00Z"):
        assert iso_text(epoch_millis(text)) == text


def test_a_bad_time_in_the_config_names_its_key():
    assert parse_time("2026-12-01T09:00:00Z", "x") == 1796115600.0
    with pytest.raises(ConfigError, match="experiment.start must be an ISO 8601"):
        parse_time("tomorrow", "experiment.start")
