-- Approvals (issue 14): a risky tool call or skill action waits for the user's yes.

-- One question to a user about one action of one task. status: pending → approved |
-- denied | expired (no answer in time) | cancelled (!stop). used marks a decision that a
-- waiting call has acted on, so that the same action asked again later in the task (or
-- after a restart re-ran the task) asks again instead of reusing an old yes.
CREATE TABLE approvals (
    id          INTEGER PRIMARY KEY,
    task_id     INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL,
    tier        TEXT NOT NULL CHECK (tier IN ('read', 'write_own', 'external', 'admin')),
    kind        TEXT NOT NULL,                 -- skill | tool
    name        TEXT NOT NULL,                 -- "email send", "WebFetch"
    summary     TEXT NOT NULL,                 -- exactly what will happen, for the user
    fingerprint TEXT NOT NULL,                 -- sha256 of kind, name and the full input
    ask_token   TEXT NOT NULL DEFAULT '',      -- Talk conversation the question went to
    status      TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    decided_by  TEXT NOT NULL DEFAULT '',
    decided_via TEXT NOT NULL DEFAULT '',      -- talk_reaction | talk_reply | page | timeout | stop
    used        INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    decided_at  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX approvals_user ON approvals (user_id, status);
CREATE INDEX approvals_task ON approvals (task_id, fingerprint);
CREATE INDEX approvals_token ON approvals (ask_token, status);

-- What a user chose on the personal page. It can only make the admin's defaults
-- stricter: the stricter of the two applies.
CREATE TABLE approval_policies (
    user_id    TEXT NOT NULL,
    tier       TEXT NOT NULL CHECK (tier IN ('read', 'write_own', 'external', 'admin')),
    policy     TEXT NOT NULL CHECK (policy IN ('allow', 'ask', 'deny')),
    updated_at TEXT NOT NULL,
    PRIMARY KEY (user_id, tier)
);
