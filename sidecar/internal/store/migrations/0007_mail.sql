-- Placeholder: e-mail intake and outbound mail. Filled in by its owner.
SELECT 1;
