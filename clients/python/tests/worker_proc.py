"""A worker process for the fault tests: `python worker_proc.py ENDPOINT TOKEN SLEEP_S`."""

import sys
import time

from hopper_client import Worker

endpoint, token, sleep_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
worker = Worker(endpoint, token=token, concurrency=5, name="doomed")


@worker.handler("nap")
def nap(job):
    time.sleep(sleep_s)


worker.run()
