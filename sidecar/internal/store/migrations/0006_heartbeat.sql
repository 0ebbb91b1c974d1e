-- Heartbeat checks from each user's HEARTBEAT.md. The file is the source of truth for a
-- check's definition (kept here as JSON so a broken file leaves the last good checks
-- running); the run-state columns belong to the sidecar and survive re-syncs of an
-- unchanged check. A changed definition starts the check over.
CREATE TABLE heartbeat_checks (
    user_id            TEXT NOT NULL,
    name               TEXT NOT NULL,
    line               INTEGER NOT NULL DEFAULT 0,   -- the check's line in HEARTBEAT.md, for messages
    kind               TEXT NOT NULL,
    definition         TEXT NOT NULL,                -- JSON of the parsed check
    enabled            INTEGER NOT NULL DEFAULT 1,   -- as written in HEARTBEAT.md
    status             TEXT NOT NULL DEFAULT '' CHECK (status IN ('', 'ok', 'alert', 'error')),
    message            TEXT NOT NULL DEFAULT '',
    last_run_at        TEXT NOT NULL DEFAULT '',
    next_run_at        TEXT NOT NULL DEFAULT '',
    last_alert_at      TEXT NOT NULL DEFAULT '',     -- when the user was last told of an alert
    consecutive_alerts INTEGER NOT NULL DEFAULT 0,
    told_keys          TEXT NOT NULL DEFAULT '[]',   -- JSON array: what the last alert told about
    memory             TEXT NOT NULL DEFAULT '',     -- what the check compares with next time
    run_requested_at   TEXT NOT NULL DEFAULT '',     -- set by !check run, cleared by the run
    reply_token        TEXT NOT NULL DEFAULT '',     -- where the requested run's outcome goes
    reply_to           INTEGER NOT NULL DEFAULT 0,
    updated_at         TEXT NOT NULL,
    PRIMARY KEY (user_id, name)
);
CREATE INDEX heartbeat_checks_next ON heartbeat_checks (next_run_at);

-- The last HEARTBEAT.md seen per user: an unchanged file costs nothing, and the problems
-- of a broken one are shown (and told once) without reading it again.
CREATE TABLE heartbeat_files (
    user_id        TEXT PRIMARY KEY,
    hash           TEXT NOT NULL,
    problems       TEXT NOT NULL DEFAULT '[]',   -- JSON array of {Line, Field, Message}
    kept_last_good INTEGER NOT NULL DEFAULT 0,
    told_hash      TEXT NOT NULL DEFAULT '',     -- the problems the user was last told about
    checked_at     TEXT NOT NULL
);
