-- Where a task's answer goes besides Talk, and what a scheduled run is.
-- email_reply: JSON {"to","subject","in_reply_to","references"} when the answer is mailed ('' otherwise).
-- command: an admin's scheduled shell command, run in the sandbox instead of the agent.
-- silent_unless_action: no answer is delivered when the run found nothing to report.
-- job: the CRON.md job, briefing or TASKS.md line the task runs for ('' for others).
ALTER TABLE tasks ADD COLUMN email_reply TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN command TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN silent_unless_action INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN job TEXT NOT NULL DEFAULT '';

-- Extra addresses a user may write to the bot from (the Nextcloud profile address counts too).
-- An address belongs to one user only.
-- sqlite:
CREATE TABLE user_emails (
    email      TEXT PRIMARY KEY COLLATE NOCASE,
    user_id    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
-- postgres:
CREATE EXTENSION IF NOT EXISTS citext;
CREATE TABLE user_emails (
    email      CITEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
-- both:
CREATE INDEX user_emails_user ON user_emails (user_id);

-- Per-user settings made on the personal settings page (key → JSON value), e.g. the
-- calendars the bot may use.
CREATE TABLE user_settings (
    user_id    TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (user_id, key)
);

-- TASKS.md lines turned into tasks: identity is the hash of the line's text, so a line is
-- queued once however often the file is polled, and its result is written back once.
CREATE TABLE tasks_md_items (
    user_id    TEXT NOT NULL,
    item_id    TEXT NOT NULL,
    text       TEXT NOT NULL,
    task_id    INTEGER NOT NULL DEFAULT 0,
    state      TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed', 'written')),
    result     TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (user_id, item_id)
);

-- Scheduled jobs: which run's result has been counted (so a result is counted once,
-- even across a crash), and whether the user was given back a missing CRON.md.
ALTER TABLE scheduled_jobs ADD COLUMN result_task_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cron_files ADD COLUMN restored_at TEXT NOT NULL DEFAULT '';
ALTER TABLE cron_files ADD COLUMN notified_hash TEXT NOT NULL DEFAULT '';
