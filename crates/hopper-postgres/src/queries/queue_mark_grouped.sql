-- Marks queues as grouped before jobs with groups are inserted into them (once per queue;
-- see hopper.mark_grouped in migration 0002). $1 queues.
SELECT hopper.mark_grouped($1::text[])
