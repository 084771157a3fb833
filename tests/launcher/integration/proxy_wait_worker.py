# SPDX-License-Identifier: MIT
"""A worker for test_store_proxy.py (stdlib only): WAITs on a key of its own through
MASTER_ADDR:MASTER_PORT (its node's store proxy), SETs it from a second connection, and prints
`PROXY_WAIT key=KEY master=ADDR:PORT` once the WAIT is answered."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "rendezvous", "proxy"))
from store_wire import WireClient, encode  # noqa: E402

port = int(os.environ["MASTER_PORT"])
key = f"h13proxy/rank{os.environ['RANK']}"
waiter, writer = WireClient(port, "G2"), WireClient(port, "G2")
waiter.send(encode("G2", "wait", [key]))
assert writer.call("ping", 5) == 5
time.sleep(0.2)  # the WAIT is held upstream (watch link or WAIT link) before its key exists
writer.send(encode("G2", "set", key, b"1"))
assert waiter.read_byte() == 0, "WAIT not answered with 0 (stopWaiting)"
assert writer.call("get", key) == b"1"
print(f"PROXY_WAIT key={key} master={os.environ['MASTER_ADDR']}:{port}", flush=True)
