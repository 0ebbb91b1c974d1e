-- Placeholder: admin settings stored in the sidecar. Filled in by its owner.
SELECT 1;
