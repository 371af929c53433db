-- Expected jobs and how many of them are completed (a sequential scan of both: the run's
-- tables are small, and this runs once a second).
SELECT (SELECT count(*) FROM chaos.expected),
       (SELECT count(*) FROM chaos.expected e JOIN hopper.jobs j ON j.id = e.job_id
        WHERE j.state = 'completed')
