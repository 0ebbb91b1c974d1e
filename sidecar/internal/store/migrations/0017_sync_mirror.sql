-- What a sync remembers belongs to one mirror of the files, not to the user: hosts that
-- share a PostgreSQL database each keep their own mirror, and one host's record of what
-- it agreed with Nextcloud read by another made that host undo the first one's edits
-- (its older copy looked edited locally) and delete the files the first one made (they
-- looked deleted locally). mirror names the mirror: '' is the one mirror of a database
-- that is one host's alone (SQLite), and every row written before this migration. The
-- workspace package takes over such a row only for a file its own mirror holds with the
-- recorded content.
-- sqlite:
CREATE TABLE sync_state_by_mirror (
    mirror      TEXT NOT NULL DEFAULT '',
    user_id     TEXT NOT NULL,
    path        TEXT NOT NULL,
    etag        TEXT NOT NULL DEFAULT '',
    local_hash  TEXT NOT NULL DEFAULT '',
    size        INTEGER NOT NULL DEFAULT 0,
    synced_at   TEXT NOT NULL,
    PRIMARY KEY (mirror, user_id, path)
);
INSERT INTO sync_state_by_mirror (mirror, user_id, path, etag, local_hash, size, synced_at)
    SELECT '', user_id, path, etag, local_hash, size, synced_at FROM sync_state;
DROP TABLE sync_state;
ALTER TABLE sync_state_by_mirror RENAME TO sync_state;
CREATE INDEX sync_state_user ON sync_state (user_id);

CREATE TABLE sync_remote_by_mirror (
    mirror TEXT NOT NULL DEFAULT '',
    tree   TEXT NOT NULL,
    path   TEXT NOT NULL,
    is_dir INTEGER NOT NULL,
    etag   TEXT NOT NULL,
    size   INTEGER NOT NULL,
    mtime  INTEGER NOT NULL,
    PRIMARY KEY (mirror, tree, path)
) WITHOUT ROWID;
INSERT INTO sync_remote_by_mirror (mirror, tree, path, is_dir, etag, size, mtime)
    SELECT '', tree, path, is_dir, etag, size, mtime FROM sync_remote;
DROP TABLE sync_remote;
ALTER TABLE sync_remote_by_mirror RENAME TO sync_remote;

CREATE TABLE sync_local_by_mirror (
    mirror   TEXT NOT NULL DEFAULT '',
    tree     TEXT NOT NULL,
    path     TEXT NOT NULL,
    size     INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    hash     TEXT NOT NULL,
    PRIMARY KEY (mirror, tree, path)
) WITHOUT ROWID;
INSERT INTO sync_local_by_mirror (mirror, tree, path, size, mtime_ns, hash)
    SELECT '', tree, path, size, mtime_ns, hash FROM sync_local;
DROP TABLE sync_local;
ALTER TABLE sync_local_by_mirror RENAME TO sync_local;
-- postgres:
ALTER TABLE sync_state ADD COLUMN mirror TEXT NOT NULL DEFAULT '';
ALTER TABLE sync_state DROP CONSTRAINT sync_state_pkey;
ALTER TABLE sync_state ADD PRIMARY KEY (mirror, user_id, path);
CREATE INDEX sync_state_user ON sync_state (user_id);
ALTER TABLE sync_remote ADD COLUMN mirror TEXT NOT NULL DEFAULT '';
ALTER TABLE sync_remote DROP CONSTRAINT sync_remote_pkey;
ALTER TABLE sync_remote ADD PRIMARY KEY (mirror, tree, path);
ALTER TABLE sync_local ADD COLUMN mirror TEXT NOT NULL DEFAULT '';
ALTER TABLE sync_local DROP CONSTRAINT sync_local_pkey;
ALTER TABLE sync_local ADD PRIMARY KEY (mirror, tree, path);
