-- Users seen through signed events from the app. The app is the authority on identity;
-- the sidecar keeps the last known profile for prompts, replies and the CLI.
CREATE TABLE users (
    id           TEXT PRIMARY KEY,
    display_name TEXT NOT NULL DEFAULT '',
    email        TEXT NOT NULL DEFAULT '',
    timezone     TEXT NOT NULL DEFAULT 'UTC',
    language     TEXT NOT NULL DEFAULT 'en',
    is_admin     INTEGER NOT NULL DEFAULT 0,
    updated_at   TEXT NOT NULL
);

-- The task queue. status: pending → locked → running → completed | failed | cancelled.
CREATE TABLE tasks (
    id                  INTEGER PRIMARY KEY,
    user_id             TEXT NOT NULL,
    source              TEXT NOT NULL,             -- talk | cli | email | tasks_md | cron | briefing
    interactive         INTEGER NOT NULL DEFAULT 1,
    status              TEXT NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending','locked','running','completed','failed','cancelled','pending_confirmation')),
    prompt              TEXT NOT NULL,
    conversation_token  TEXT NOT NULL DEFAULT '',
    reply_to_message_id INTEGER NOT NULL DEFAULT 0,
    dedupe_key          TEXT UNIQUE,
    attempts            INTEGER NOT NULL DEFAULT 0,
    max_attempts        INTEGER NOT NULL DEFAULT 4,
    transient_retries   INTEGER NOT NULL DEFAULT 0,
    next_attempt_at     TEXT NOT NULL,
    lease_owner         TEXT NOT NULL DEFAULT '',
    lease_until         TEXT NOT NULL DEFAULT '',
    result              TEXT NOT NULL DEFAULT '',
    error               TEXT NOT NULL DEFAULT '',
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    cost_usd            REAL NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL,
    started_at          TEXT NOT NULL DEFAULT '',
    finished_at         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX tasks_claim ON tasks (status, next_attempt_at);
CREATE INDEX tasks_user ON tasks (user_id, status);

-- What happened during a run: progress lines and tool actions, in order.
CREATE TABLE task_events (
    task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    at      TEXT NOT NULL,
    kind    TEXT NOT NULL,                            -- progress | tool | result | error
    text    TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- Conversations the bot has seen and how it answers there.
CREATE TABLE conversations (
    token        TEXT PRIMARY KEY,
    name         TEXT NOT NULL DEFAULT '',
    type         INTEGER NOT NULL DEFAULT 0,
    user_count   INTEGER NOT NULL DEFAULT 0,
    private      INTEGER NOT NULL DEFAULT 0,
    respond_mode TEXT NOT NULL DEFAULT '' CHECK (respond_mode IN ('', 'all', 'mentions')),
    updated_at   TEXT NOT NULL
);

-- Every message of conversations where the bot is enabled, for context.
CREATE TABLE conversation_messages (
    token       TEXT NOT NULL,
    message_id  INTEGER NOT NULL,
    actor_type  TEXT NOT NULL,
    actor_id    TEXT NOT NULL,
    actor_name  TEXT NOT NULL DEFAULT '',
    text        TEXT NOT NULL,
    reply_to_id INTEGER NOT NULL DEFAULT 0,
    from_bot    INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (token, message_id)
);
CREATE INDEX conversation_messages_recent ON conversation_messages (token, created_at);

-- Replies, progress and notices not yet accepted by Talk.
CREATE TABLE talk_outbox (
    id              INTEGER PRIMARY KEY,
    token           TEXT NOT NULL,
    message         TEXT NOT NULL,
    reply_to        INTEGER NOT NULL DEFAULT 0,
    reference_id    TEXT NOT NULL UNIQUE,
    task_id         INTEGER REFERENCES tasks(id) ON DELETE SET NULL,
    kind            TEXT NOT NULL DEFAULT 'reply',     -- reply | progress | notice
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','sent','failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    last_error      TEXT NOT NULL DEFAULT '',
    created_at      TEXT NOT NULL,
    sent_at         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX talk_outbox_due ON talk_outbox (status, next_attempt_at, id);

-- Nonces of signed requests from the app, kept until their timestamp window closes.
CREATE TABLE request_nonces (
    nonce      TEXT PRIMARY KEY,
    expires_at TEXT NOT NULL
);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- SQLite gives every table an implicit rowid: the order rows were inserted in. Two
-- readers use it: the live-progress hub follows task_events by rowid, and the
-- conversation context breaks ties of created_at by it. PostgreSQL has no such column,
-- so there it is an explicit identity column of the same name.
-- postgres:
ALTER TABLE task_events ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE INDEX task_events_rowid ON task_events (rowid);
ALTER TABLE conversation_messages ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
