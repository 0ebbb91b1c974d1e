-- Several hosts sharing one PostgreSQL database (issue 15).
--
-- SQLite gives every table an implicit rowid: the order rows were inserted in. Two
-- readers use it: the live-progress hub follows task_events by rowid, and the
-- conversation context breaks ties of created_at by it. PostgreSQL has no such column,
-- so there it is an explicit identity column of the same name; nothing changes on SQLite.
-- postgres:
ALTER TABLE task_events ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE INDEX task_events_rowid ON task_events (rowid);
ALTER TABLE conversation_messages ADD COLUMN rowid BIGINT GENERATED ALWAYS AS IDENTITY;
