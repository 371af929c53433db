-- The claim index leads with a hash of the queue name instead of the name itself.
--
-- A btree compares its key columns one after the other, and finds each column of an index
-- tuple by walking the ones before it whenever one of them has a variable width: with the
-- queue's text first, every comparison of priority, run_at and id inside a page paid that
-- walk (`nocache_index_getattr`, beside `_bt_compare`, in a profile of W1). A fixed-width
-- first column lets PostgreSQL cache the offsets. Measured on 2026-11-24 (2-core machine,
-- PostgreSQL 15): a server-side binary COPY of 100,000 job rows, alternated, ms: 918 / 930 /
-- 844 with (queue, …), 808 / 826 / 666 with (hashtextextended(queue, 0), …); the whole W1
-- (`hopper bench --workload enqueue`, 1,000 per call), alternated on two fresh schemas:
-- 126,655 / 136,157 / 133,092 / 131,986 against 142,753 / 136,248 / 146,511 / 148,943
-- jobs/s (+9% median). A collation of "C" on the text column changed nothing (the cost is
-- the variable width, not the comparison), and an md5-based key cost more than it saved.
--
-- Every claim asks for `hashtextextended(queue, 0) = hashtextextended($1, 0) AND queue =
-- $1`: the first condition reaches the index, the second drops the rare job of another
-- queue whose name hashes alike (read in the heap, which the claim locks anyway).
-- hashtextextended is what PostgreSQL's hash partitioning stores its rows by, so it does
-- not change across versions without breaking those tables; were it ever to, a REINDEX of
-- this index would be all it takes, since only the index holds the hash.
--
-- The migration locks hopper.jobs while it builds the new index: on a large table, claims
-- and writes wait for it (seconds per million waiting jobs; the index holds only those).

DROP INDEX hopper.jobs_claim_idx;

CREATE INDEX jobs_claim_idx ON hopper.jobs (hashtextextended(queue, 0), priority, run_at, id)
    WHERE state = 'available';
