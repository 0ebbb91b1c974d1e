-- Placeholder: heartbeat checks (HEARTBEAT.md). Filled in by its owner.
SELECT 1;
