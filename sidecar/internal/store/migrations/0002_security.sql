-- Security events: refused skill and network requests, with a stable reason code.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY,
    at         TEXT NOT NULL,
    user_id    TEXT NOT NULL DEFAULT '',
    task_id    INTEGER NOT NULL DEFAULT 0,
    component  TEXT NOT NULL,            -- credproxy | netproxy | gateway | deferred
    action     TEXT NOT NULL,            -- what was asked (skill name, host:port, op kind)
    allowed    INTEGER NOT NULL,
    reason     TEXT NOT NULL DEFAULT '', -- unknown_skill | not_authorized | credential_not_present | host_not_allowed | …
    detail     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_user ON audit_log (user_id, at);

-- Per-user credentials that skills may use (API tokens, app passwords). Values are only
-- ever handed to a skill process outside the sandbox.
CREATE TABLE user_credentials (
    user_id    TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (user_id, name)
);

-- A small key-value store per user and namespace, written through deferred operations.
CREATE TABLE kv_store (
    user_id    TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (user_id, namespace, key)
);

-- Model usage per task as the gateway saw it, for !usage and budgets.
CREATE TABLE usage (
    id             INTEGER PRIMARY KEY,
    at             TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    task_id        INTEGER NOT NULL DEFAULT 0,
    model          TEXT NOT NULL DEFAULT '',
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_read     INTEGER NOT NULL DEFAULT 0,
    cache_creation INTEGER NOT NULL DEFAULT 0,
    requests       INTEGER NOT NULL DEFAULT 0,
    cost_usd       REAL NOT NULL DEFAULT 0
);
CREATE INDEX usage_user_at ON usage (user_id, at);
