-- Settings pages (docs/user-api.md).

-- What the app last said about a user (session call or Talk event): their Nextcloud
-- groups and whether they are a Nextcloud admin. Access is decided from these and the
-- admin's access settings each time, so a changed setting takes effect at once.
-- users.is_admin keeps meaning "Istota admin" (Nextcloud admin, or named in the settings).
ALTER TABLE users ADD COLUMN groups TEXT NOT NULL DEFAULT '[]';          -- JSON array of group ids
ALTER TABLE users ADD COLUMN nextcloud_admin INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN session_at TEXT NOT NULL DEFAULT '';        -- last settings-page session

-- Admin settings made in the admin panel live in the settings table of 0001, one row per
-- key ("admin.workers.max" → JSON value), layered over the config file at start. The
-- brain API key is never stored here: it is a 0600 file under data_dir/secrets/.
ALTER TABLE settings ADD COLUMN updated_at TEXT NOT NULL DEFAULT '';
