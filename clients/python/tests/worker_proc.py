"""A worker process for the fault tests: `python worker_proc.py ENDPOINT TOKEN SLEEP_S`.
Its `nap` jobs sleep SLEEP_S seconds; its `chatter` jobs first log `lines` lines."""

import sys
import time

from hopper_client import Worker

endpoint, token, sleep_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
worker = Worker(endpoint, token=token, concurrency=5, name="doomed")


@worker.handler("nap")
def nap(job):
    time.sleep(sleep_s)


@worker.handler("chatter")
def chatter(job):
    for i in range(job.args["lines"]):
        job.log("info", f"line {i}", attempt=job.attempt)
    time.sleep(sleep_s)


worker.run()
