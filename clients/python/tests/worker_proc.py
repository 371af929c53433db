"""A worker process for the fault tests: `python worker_proc.py ENDPOINT TOKEN SLEEP_S`."""

import sys
import time

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), ".."))

from hopper_client import Worker  # noqa: E402

endpoint, token, sleep_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
worker = Worker(endpoint, token=token, concurrency=5, name="doomed")


@worker.handler("nap")
def nap(job):
    time.sleep(sleep_s)


worker.run()
