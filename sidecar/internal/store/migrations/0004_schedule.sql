-- Scheduled jobs from each user's CRON.md. The file is the source of truth for the
-- definition columns; the run-state columns (failures, last/next run, disables made with
-- !cron or by repeated failure) belong to the sidecar and survive re-syncs of an unchanged job.
CREATE TABLE scheduled_jobs (
    user_id              TEXT NOT NULL,
    name                 TEXT NOT NULL,
    line                 INTEGER NOT NULL DEFAULT 0,   -- the job's line in CRON.md, for messages
    schedule             TEXT NOT NULL,
    timezone             TEXT NOT NULL,
    prompt               TEXT NOT NULL DEFAULT '',
    command              TEXT NOT NULL DEFAULT '',
    conversation         TEXT NOT NULL DEFAULT '',
    email                TEXT NOT NULL DEFAULT '',
    silent_unless_action INTEGER NOT NULL DEFAULT 0,
    enabled              INTEGER NOT NULL DEFAULT 1,   -- as written in CRON.md
    disabled_by          TEXT NOT NULL DEFAULT '' CHECK (disabled_by IN ('', 'user', 'failures')),
    disabled_reason      TEXT NOT NULL DEFAULT '',
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    last_run_at          TEXT NOT NULL DEFAULT '',
    last_task_id         INTEGER NOT NULL DEFAULT 0,
    last_result          TEXT NOT NULL DEFAULT '',     -- '' | ok | failed
    next_run_at          TEXT NOT NULL DEFAULT '',
    run_requested_at     TEXT NOT NULL DEFAULT '',     -- set by !cron run, cleared once enqueued
    updated_at           TEXT NOT NULL,
    PRIMARY KEY (user_id, name)
);
CREATE INDEX scheduled_jobs_next ON scheduled_jobs (next_run_at);

-- The last CRON.md seen per user, so an unchanged file costs nothing and the problems of
-- a broken one can be shown again.
CREATE TABLE cron_files (
    user_id        TEXT PRIMARY KEY,
    hash           TEXT NOT NULL,
    problems       TEXT NOT NULL DEFAULT '[]',   -- JSON array of {line, field, message}
    kept_last_good INTEGER NOT NULL DEFAULT 0,
    checked_at     TEXT NOT NULL,
    last_good_at   TEXT NOT NULL DEFAULT ''
);
