-- What a sync remembers so it need not ask again (workspace package):
-- sync_remote is the last listing of each synced tree's remote side (paths relative to
-- the tree, '' is the tree itself). Nextcloud changes a folder's ETag whenever anything
-- below it changes, so a folder whose ETag is unchanged is taken from here instead of
-- being listed again.
CREATE TABLE sync_remote (
    tree   TEXT NOT NULL,
    path   TEXT NOT NULL,
    is_dir INTEGER NOT NULL,
    etag   TEXT NOT NULL,
    size   INTEGER NOT NULL,
    mtime  INTEGER NOT NULL,          -- unix seconds
    PRIMARY KEY (tree, path)
) WITHOUT ROWID;

-- sync_local is the SHA-256 of each mirror file as of a size and modification time, so a
-- scan reads only files that changed.
CREATE TABLE sync_local (
    tree     TEXT NOT NULL,
    path     TEXT NOT NULL,
    size     INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    hash     TEXT NOT NULL,
    PRIMARY KEY (tree, path)
) WITHOUT ROWID;

-- Trees whose folders, seed files and share were made in Nextcloud, with the version of
-- that layout, so a restart does not provision every user again.
CREATE TABLE workspace_provisioned (
    tree   TEXT PRIMARY KEY,
    layout INTEGER NOT NULL,
    at     TEXT NOT NULL
);
