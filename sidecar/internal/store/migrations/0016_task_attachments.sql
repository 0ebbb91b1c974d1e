-- Files shared with a task's request (issue 16: voice messages and images). The app
-- copies a file shared in Talk into the user's inbox/; the task keeps which, so that a
-- voice message is transcribed before the agent starts.
CREATE TABLE task_attachments (
    task_id  INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    path     TEXT NOT NULL,                -- relative to the user's workspace: inbox/…
    mimetype TEXT NOT NULL DEFAULT '',
    size     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, path)
);
