-- Wakes idle workers of the given queues. Sent inside the inserting transaction, so it is
-- delivered at commit, once per queue however many jobs the transaction inserted.
SELECT pg_notify('hopper_wake', 'a:' || q)
FROM unnest($1::text[]) AS q
