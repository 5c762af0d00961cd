"""``-o json`` times are ISO 8601 with a timezone (``gpudock.cli.jsontime``)."""

from __future__ import annotations

from gpudock.cli.jsontime import iso, iso_times


def test_epoch_seconds_become_utc_iso_8601() -> None:
    assert iso(1796299200) == "2026-12-03T12:00:00+00:00"
    assert iso(1796299200.25) == "2026-12-03T12:00:00.250+00:00"


def test_every_time_field_at_any_depth_is_converted_and_nothing_else() -> None:
    job = {
        "id": 7,
        "submitted_at": 1796299200.0,
        "finished_at": None,
        "spec": {"max_runtime": 3600.0, "gpus": 2},
        "events": [{"at": 1796299201, "to": "RUNNING"}],
        "reserved_for": {"eta": 1796299260.5, "job": 3},
        "last_seen": 1796299200,
        "held": True,
        "started_at": True,  # not a number: left alone
    }

    assert iso_times(job) == {
        "id": 7,
        "submitted_at": "2026-12-03T12:00:00+00:00",
        "finished_at": None,
        "spec": {"max_runtime": 3600.0, "gpus": 2},
        "events": [{"at": "2026-12-03T12:00:01+00:00", "to": "RUNNING"}],
        "reserved_for": {"eta": "2026-12-03T12:01:00.500+00:00", "job": 3},
        "last_seen": "2026-12-03T12:00:00+00:00",
        "held": True,
        "started_at": True,
    }
