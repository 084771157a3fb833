"""An honest PyTorch TCPStore client for the adversarial soak: runs every store call the installed
torch has, in a loop, checking each result, until told to stop.

  python honest_client.py PORT NAME SECONDS [PEER_NAME]

Prints one line "honest NAME: N operations OK" and exits 0, or names the first failure and exits 1.
With PEER_NAME, the last round also waits (longer than the store's idle timeout) for a key the
peer sets, and sets one the peer waits for.
"""
import datetime
import sys
import time

import torch.distributed as dist


def main():
    port, name, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    peer = sys.argv[4] if len(sys.argv) > 4 else None
    s = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    ops = 0

    def expect(cond, what):
        if not cond:
            print(f"honest {name}: FAILED after {ops} operations: {what}", flush=True)
            sys.exit(1)

    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        k = f"{name}/k{i % 50}"
        v = f"value-{i}-" + "x" * (i % 700)
        s.set(k, v)
        expect(s.get(k) == v.encode(), f"get {k}")
        c = f"{name}/counter"
        expect(s.add(c, 2) == 2 * (i + 1), "add")
        expect(s.compare_set(k, v, v + "!") == (v + "!").encode(), "compare_set match")
        expect(s.compare_set(k, "no", "zz") == (v + "!").encode(), "compare_set mismatch")
        s.wait([k, c])
        expect(isinstance(s.num_keys(), int), "num_keys")
        ops += 7
        if hasattr(s, "check"):
            expect(s.check([k]), "check")
            ops += 1
        if hasattr(s, "append"):
            a = f"{name}/appended{i % 10}"
            s.set(a, "a")
            s.append(a, "b")
            expect(s.get(a) == b"ab", "append")
            ops += 3
        if hasattr(s, "multi_set"):
            ks = [f"{name}/m{j}" for j in range(5)]
            s.multi_set(ks, [f"{i}-{j}" for j in range(5)])
            expect(s.multi_get(ks) == [f"{i}-{j}".encode() for j in range(5)], "multi_get")
            ops += 2
        if i % 10 == 0:
            expect(s.delete_key(k), "delete_key")
            ops += 1
        i += 1
    if peer:
        # Blocked in WAIT for longer than the store's --idle-timeout: must not be cut off.
        s.set(f"{name}/ready", "1")
        s.wait([f"{peer}/ready"])
        if name < peer:
            time.sleep(3)  # the peer is now blocked in WAIT for longer than the idle timeout
        s.set(f"{name}/late", "1")
        s.wait([f"{peer}/late"])
        ops += 4
    print(f"honest {name}: {ops} operations OK", flush=True)


if __name__ == "__main__":
    main()
