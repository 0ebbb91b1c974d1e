-- Searchable memory: chunks of conversations and memory files, per namespace
-- ("user:<uid>" or "channel:<token>"), deduplicated by content hash.
CREATE TABLE memory_chunks (
    id           INTEGER PRIMARY KEY,
    namespace    TEXT NOT NULL,
    source       TEXT NOT NULL,              -- conversation | memory_file | user_md | channel_md | fact
    source_ref   TEXT NOT NULL DEFAULT '',   -- file path, task id, …
    content      TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    ephemeral    INTEGER NOT NULL DEFAULT 1, -- subject to retention (USER.md chunks are not)
    created_at   TEXT NOT NULL,              -- when what it describes happened
    indexed_at   TEXT NOT NULL,
    embedding    BLOB,                       -- little-endian float32 vector, when an embeddings endpoint is configured
    embed_model  TEXT NOT NULL DEFAULT '',
    UNIQUE (namespace, content_hash)
);
CREATE INDEX memory_chunks_ns_created ON memory_chunks (namespace, created_at);
CREATE INDEX memory_chunks_source ON memory_chunks (namespace, source, source_ref);

-- sqlite:
CREATE VIRTUAL TABLE memory_fts USING fts5(
    content,
    content = 'memory_chunks',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_chunks_ai AFTER INSERT ON memory_chunks BEGIN
    INSERT INTO memory_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER memory_chunks_ad AFTER DELETE ON memory_chunks BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER memory_chunks_au AFTER UPDATE OF content ON memory_chunks BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO memory_fts (rowid, content) VALUES (new.id, new.content);
END;
-- both:

-- The temporal knowledge graph: (subject, predicate, object) valid from … until.
CREATE TABLE knowledge_facts (
    id          INTEGER PRIMARY KEY,
    namespace   TEXT NOT NULL,
    subject     TEXT NOT NULL,
    predicate   TEXT NOT NULL,
    object      TEXT NOT NULL,
    valid_from  TEXT NOT NULL,
    valid_until TEXT NOT NULL DEFAULT '',   -- '' while current
    ephemeral   INTEGER NOT NULL DEFAULT 0, -- expires after 90 days
    source      TEXT NOT NULL DEFAULT '',   -- sleep_cycle | agent | user
    created_at  TEXT NOT NULL
);
CREATE INDEX knowledge_facts_current ON knowledge_facts (namespace, valid_until, subject, predicate);

-- Nightly sleep-cycle progress per namespace.
CREATE TABLE sleep_state (
    namespace    TEXT PRIMARY KEY,
    last_run_at  TEXT NOT NULL DEFAULT '',
    last_task_id INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT NOT NULL DEFAULT '',
    updated_at   TEXT NOT NULL
);

-- What the workspace mirror last agreed on with Nextcloud, per file.
CREATE TABLE sync_state (
    user_id     TEXT NOT NULL,
    path        TEXT NOT NULL,               -- relative to the user's root, '/'-separated
    etag        TEXT NOT NULL DEFAULT '',    -- remote ETag at the last agreement
    local_hash  TEXT NOT NULL DEFAULT '',    -- sha256 of the local content then
    size        INTEGER NOT NULL DEFAULT 0,
    synced_at   TEXT NOT NULL,
    PRIMARY KEY (user_id, path)
);
