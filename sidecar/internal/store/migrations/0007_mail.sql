-- E-mail as a channel (package mail).

-- Every message taken from the bot's inbox, once: the key is the sender's address and the
-- Message-ID (or a hash of the main headers), so a message delivered or fetched again is
-- recognised, and the dispositions are what the admin's health view counts.
-- disposition: queued (became task task_id) | ignored (never triggered work; reason says why)
-- | refused (a known user's message that could not be processed; the user was told).
CREATE TABLE mail_inbound (
    message_key  TEXT PRIMARY KEY,
    received_at  TEXT NOT NULL,
    from_addr    TEXT NOT NULL DEFAULT '',
    user_id      TEXT NOT NULL DEFAULT '',
    task_id      INTEGER NOT NULL DEFAULT 0,
    disposition  TEXT NOT NULL CHECK (disposition IN ('queued', 'ignored', 'refused')),
    reason       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX mail_inbound_received ON mail_inbound (received_at);

-- Mail waiting to be submitted over SMTP, written in the transaction that finishes its task
-- (or by the email skill). dedupe_key makes each answer a single row; message_id is chosen
-- when the row is written, so a resend after a crash carries the same Message-ID.
-- kind: reply (a task's answer or failure notice) | notice (the channel's own message to a
-- user) | skill (sent by the agent through the email skill).
CREATE TABLE mail_outbox (
    id              INTEGER PRIMARY KEY,
    dedupe_key      TEXT NOT NULL UNIQUE,
    kind            TEXT NOT NULL CHECK (kind IN ('reply', 'notice', 'skill')),
    user_id         TEXT NOT NULL DEFAULT '',
    task_id         INTEGER REFERENCES tasks(id) ON DELETE SET NULL,
    recipients      TEXT NOT NULL,                 -- JSON array of addresses
    subject         TEXT NOT NULL,
    in_reply_to     TEXT NOT NULL DEFAULT '',
    refs            TEXT NOT NULL DEFAULT '',      -- msg-ids separated by spaces, oldest first
    body            TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    last_error      TEXT NOT NULL DEFAULT '',
    created_at      TEXT NOT NULL,
    sent_at         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX mail_outbox_due ON mail_outbox (status, next_attempt_at, id);
CREATE INDEX mail_outbox_user ON mail_outbox (user_id, kind, created_at);

-- Every message the bot sent, for the user's and the admin's record.
CREATE TABLE mail_sent (
    id         INTEGER PRIMARY KEY,
    sent_at    TEXT NOT NULL,
    user_id    TEXT NOT NULL DEFAULT '',
    task_id    INTEGER NOT NULL DEFAULT 0,
    kind       TEXT NOT NULL,
    recipients TEXT NOT NULL,                      -- comma-separated addresses
    subject    TEXT NOT NULL,
    message_id TEXT NOT NULL UNIQUE
);
CREATE INDEX mail_sent_user ON mail_sent (user_id, sent_at);
