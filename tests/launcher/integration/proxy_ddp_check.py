# SPDX-License-Identifier: MIT
"""ddp_check.py with one more line first: the store address this worker was given."""
import os
import runpy

print(f"STORE_ADDR {os.environ['GROUP_RANK']} {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddp_check.py"), run_name="__main__")
