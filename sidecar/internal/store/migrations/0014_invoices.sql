-- Invoicing (package invoice). INVOICING.md and _INVOICES.md in the user's config folder
-- are the source of truth for who bills whom and for what; these tables hold what the
-- files must not be trusted with: the invoice numbers already given out (never reused,
-- whatever happens to the files), the issued invoices as they were issued, and which
-- work-log entries they billed.

-- The last number given out per user, prefix (one per entity) and year:
-- PREFIX-YYYY-NNNN. Only ever incremented.
CREATE TABLE invoice_numbers (
    user_id TEXT NOT NULL,
    prefix  TEXT NOT NULL,
    year    INTEGER NOT NULL,
    last    INTEGER NOT NULL,
    PRIMARY KEY (user_id, prefix, year)
);

CREATE TABLE invoices (
    id                  INTEGER PRIMARY KEY,
    user_id             TEXT NOT NULL,
    number              TEXT NOT NULL,
    entity              TEXT NOT NULL,               -- the entity's key in INVOICING.md
    client              TEXT NOT NULL,               -- the client's key
    period              TEXT NOT NULL DEFAULT '',    -- YYYY-MM of the billed work, '' for a one-off
    issued_on           TEXT NOT NULL,               -- YYYY-MM-DD
    due_on              TEXT NOT NULL,               -- YYYY-MM-DD
    currency            TEXT NOT NULL,
    total_cents         INTEGER NOT NULL,
    document            TEXT NOT NULL,               -- JSON: the invoice as issued (parties, lines, totals)
    pdf_path            TEXT NOT NULL,               -- relative to /Users/{uid}/
    paid_on             TEXT NOT NULL DEFAULT '',    -- YYYY-MM-DD, '' while open
    overdue_notified_at TEXT NOT NULL DEFAULT '',    -- when the one overdue notice was queued
    created_at          TEXT NOT NULL,
    UNIQUE (user_id, number)
);
CREATE INDEX invoices_open ON invoices (paid_on, due_on);

-- Work-log entries already billed, by a key derived from the entry's content, so that
-- generating twice never bills an entry twice even if its marker in _INVOICES.md is lost.
CREATE TABLE invoice_entries (
    user_id    TEXT NOT NULL,
    entry_key  TEXT NOT NULL,
    invoice_id INTEGER NOT NULL REFERENCES invoices (id),
    PRIMARY KEY (user_id, entry_key)
);

-- Scheduled work done per user and period (monthly generation, the reminder before it,
-- the notice that it cannot run),
-- so a restart or a repeated tick never does it twice.
CREATE TABLE invoice_runs (
    user_id TEXT NOT NULL,
    kind    TEXT NOT NULL,   -- generate | remind | problem (told why generate cannot run)
    period  TEXT NOT NULL,   -- YYYY-MM the run was for
    done_at TEXT NOT NULL,
    PRIMARY KEY (user_id, kind, period)
);
