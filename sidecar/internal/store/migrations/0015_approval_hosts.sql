-- The network host an approved action reaches (issue 14: reaching a new host through
-- the allowlist is an external action). Once a user approved reaching a host — for a
-- fetch, a page, or a connection of a command — the network proxy lets their tasks
-- reach it again without asking. Empty for actions that reach no host.
ALTER TABLE approvals ADD COLUMN host TEXT NOT NULL DEFAULT '';
CREATE INDEX approvals_host ON approvals (user_id, host, status);
