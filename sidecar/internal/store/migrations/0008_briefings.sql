-- Placeholder: briefings (BRIEFINGS.md). Filled in by its owner.
SELECT 1;
