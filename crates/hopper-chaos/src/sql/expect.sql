-- The jobs of one enqueued batch ($1), in the batch's transaction.
INSERT INTO chaos.expected (job_id) SELECT unnest($1::uuid[])
