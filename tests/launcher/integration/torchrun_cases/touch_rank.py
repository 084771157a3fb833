# SPDX-License-Identifier: MIT
"""Worker of the replayed launcher cases: checks the parent's sentinel variable reached it, then
creates <dir>/<RANK> (or fails on purpose with --fail)."""
import argparse
import os
import pathlib

parser = argparse.ArgumentParser()
parser.add_argument("--touch-file-dir")
parser.add_argument("--fail", action="store_true")
args = parser.parse_args()
if args.fail:
    raise RuntimeError("failing on purpose (--fail)")
assert os.environ["TEST_SENTINEL_PARENT"] == "FOOBAR", "the launcher dropped the parent's environment"
for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
    assert name in os.environ, name
pathlib.Path(args.touch_file_dir, os.environ["RANK"]).touch()
