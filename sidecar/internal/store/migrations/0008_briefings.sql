-- Briefings from each user's BRIEFINGS.md. The file (merged over the admin's defaults)
-- is the source of truth for the definition columns; the run-state columns belong to the
-- sidecar and survive re-syncs of an unchanged briefing (same def_hash).
CREATE TABLE briefings (
    user_id        TEXT NOT NULL,
    name           TEXT NOT NULL,
    line           INTEGER NOT NULL DEFAULT 0,   -- the briefing's line in BRIEFINGS.md, for messages
    schedule       TEXT NOT NULL,
    timezone       TEXT NOT NULL,                -- the user's zone when synced
    output         TEXT NOT NULL DEFAULT 'talk' CHECK (output IN ('talk', 'email', 'both')),
    conversation   TEXT NOT NULL DEFAULT '',
    email          TEXT NOT NULL DEFAULT '',
    components     TEXT NOT NULL DEFAULT '[]',   -- JSON array, admin defaults applied
    feeds          TEXT NOT NULL DEFAULT '[]',   -- JSON array, the briefing's and the admin's feeds
    enabled        INTEGER NOT NULL DEFAULT 1,   -- as written in BRIEFINGS.md
    def_hash       TEXT NOT NULL,                -- hash of every definition column
    next_run_at    TEXT NOT NULL DEFAULT '',     -- '' when disabled
    last_run_at    TEXT NOT NULL DEFAULT '',     -- scheduled time of the last enqueued run
    last_task_id   INTEGER NOT NULL DEFAULT 0,
    last_result    TEXT NOT NULL DEFAULT '',     -- '' | ok | failed | cancelled
    result_task_id INTEGER NOT NULL DEFAULT 0,   -- the task last_result was taken from
    updated_at     TEXT NOT NULL,
    PRIMARY KEY (user_id, name)
);
CREATE INDEX briefings_next ON briefings (next_run_at);

-- The last BRIEFINGS.md seen per user: an unchanged file costs nothing, the problems of a
-- broken one are shown again, and the user is told about them once per version.
CREATE TABLE briefing_files (
    user_id        TEXT PRIMARY KEY,
    hash           TEXT NOT NULL,
    problems       TEXT NOT NULL DEFAULT '[]',   -- JSON array of {Line, Field, Message}
    kept_last_good INTEGER NOT NULL DEFAULT 0,
    checked_at     TEXT NOT NULL,
    last_good_at   TEXT NOT NULL DEFAULT '',
    notified_hash  TEXT NOT NULL DEFAULT ''
);
