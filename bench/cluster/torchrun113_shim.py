"""Fallback shim for Debian's torchrun 1.13 on Python 3.11 (bench/launcher/torchrun113_shim.py is
preferred when present): Std.from_str returns None for "0" because IntFlag iteration skips NONE,
so map None to Std.NONE, then run torch.distributed.run.main()."""
import sys

from torch.distributed.elastic.multiprocessing import api

_original = api.Std.from_str
api.Std.from_str = classmethod(lambda cls, vm: (lambda r: api.Std.NONE if r is None else r)(_original(vm)))

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    main()
