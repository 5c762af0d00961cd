"""Migration 0005 on real SQLite and PostgreSQL: jobs that got the right to preempt by
default (no priority class) lose it; jobs whose class gave it keep it; ended jobs stay."""

from __future__ import annotations

from sqlalchemy import JSON, bindparam, text

from gpudock.store.db import Database


def test_only_classless_active_jobs_lose_the_default_right_to_preempt(db_url: str) -> None:
    database = Database.open(db_url, migrate=False)
    database.migrate("0004")
    insert = text(
        'INSERT INTO jobs (id, "user", queue, priority, spec, gpus, state, attempt, version, '
        "submitted_at, pending_reasons, can_preempt) VALUES (:id, 'al', 'default', 0, :spec, 1, "
        ":state, 0, 0, 1.0, :reasons, :can)"
    ).bindparams(bindparam("spec", type_=JSON), bindparam("reasons", [], type_=JSON))
    rows = [
        {"id": 1, "spec": {"image": "img"}, "state": "PENDING", "can": True},
        {"id": 2, "spec": {"image": "img"}, "state": "RUNNING", "can": True},
        {"id": 3, "spec": {"image": "img", "priority_class": "urgent"}, "state": "PENDING",
         "can": True},
        {"id": 4, "spec": {"image": "img"}, "state": "SUCCEEDED", "can": True},
    ]  # fmt: skip
    with database.engine.begin() as conn:
        conn.execute(insert, rows)
    database.migrate()
    with database.engine.connect() as conn:
        after = dict(conn.execute(text("SELECT id, can_preempt FROM jobs ORDER BY id")).all())
        conn.execute(
            text(
                'INSERT INTO jobs (id, "user", queue, priority, spec, gpus, state, attempt, '
                "version, submitted_at, pending_reasons) VALUES (5, 'al', 'default', 0, '{}', 1, "
                "'PENDING', 0, 0, 1.0, '[]')"
            )
        )
        fresh = conn.execute(text("SELECT can_preempt FROM jobs WHERE id = 5")).scalar()
        conn.rollback()
    assert {k: bool(v) for k, v in after.items()} == {1: False, 2: False, 3: True, 4: True}
    if not database.is_sqlite:  # SQLite keeps its default: gpudock always writes the column
        assert not fresh, "a row written without the column no longer may preempt"
    database.close()
