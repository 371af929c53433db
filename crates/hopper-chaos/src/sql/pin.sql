-- Pins the xmin horizon: a snapshot taken and held until COMMIT. Vacuum cannot remove any
-- row version deleted after it, in any table of this database.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 1;
