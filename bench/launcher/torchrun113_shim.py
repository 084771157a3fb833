# SPDX-License-Identifier: MIT
"""Runs Debian's torchrun 1.13 on Python 3.11, for benchmarks only.

Debian's torch 1.13 torchrun crashes at start on Python 3.11: Std.from_str() iterates the IntFlag
`Std`, and 3.11 skips the NONE=0 and ALL=3 members, so "0" (the default of --redirects/--tee) maps
to None. This shim replaces from_str with the upstream fix (`Std(int(v))`) and runs torchrun.
Usage: /usr/bin/python3 torchrun113_shim.py [torchrun args...]
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    def to_std(v):
        return cls(int(v))

    if re.match(api._VALUE_REGEX, vm):
        return to_std(vm)
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): to_std(v) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    main()
