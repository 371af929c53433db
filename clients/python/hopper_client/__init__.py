"""Python client and worker for hopper's network server (``hopper serve``).

The protocol is described in ``docs/protocol.md`` of the hopper repository; this package is
written from that document alone.

    from hopper_client import Client, Worker

    client = Client("tcp://127.0.0.1:7010", token="...")
    job_id = client.submit("send_email", {"to": "ada@example.com"})
    print(client.status(job_id)["state"])

    worker = Worker("tcp://127.0.0.1:7010", token="...", concurrency=4)

    @worker.handler("send_email")
    def send_email(job):
        print("mail to", job.args["to"])

    worker.run()   # until worker.stop() or SIGINT/SIGTERM
"""

from ._connection import HopperError, Unavailable
from .client import MAX_BATCH_JOBS, Client
from .worker import Job, Permanent, Snooze, Worker

PROTOCOL_VERSION = 1

__all__ = [
    "Client",
    "HopperError",
    "Job",
    "MAX_BATCH_JOBS",
    "Permanent",
    "PROTOCOL_VERSION",
    "Snooze",
    "Unavailable",
    "Worker",
]
