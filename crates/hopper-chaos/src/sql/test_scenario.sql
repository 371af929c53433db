-- The report's test (report.rs): three expected jobs. A completed once after a superseded
-- run; B completed but run twice under its completing lease; C never completed; and B
-- completed a second time by a stray write (a double completion).
INSERT INTO hopper.jobs (id, kind, state, attempt) VALUES
    ('00000000-0000-7000-8000-00000000000a', 't', 'running', 2),
    ('00000000-0000-7000-8000-00000000000b', 't', 'running', 1),
    ('00000000-0000-7000-8000-00000000000c', 't', 'available', 1);
INSERT INTO chaos.expected (job_id) SELECT id FROM hopper.jobs;
INSERT INTO chaos.executions (job_id, attempt, worker, pid) VALUES
    ('00000000-0000-7000-8000-00000000000a', 1, 'w', 1),
    ('00000000-0000-7000-8000-00000000000a', 2, 'w', 2),
    ('00000000-0000-7000-8000-00000000000b', 1, 'w', 1),
    ('00000000-0000-7000-8000-00000000000b', 1, 'w', 2),
    ('00000000-0000-7000-8000-00000000000c', 1, 'w', 1);
UPDATE hopper.jobs SET state = 'completed' WHERE state = 'running';
UPDATE hopper.jobs SET state = 'completed' WHERE id = '00000000-0000-7000-8000-00000000000b';
