"""Wing & Gong linearizability check of one key's history against a sequential model of the store.

An operation is a dict: kind, arg, result, inv, res (monotonic ns). Linearizability is local (a
history is linearizable iff each key's sub-history is), so histories are checked per key."""


def apply(state, op):
    """(ok, new_state) for running `op` on `state` (bytes or None = absent) in the sequential store."""
    kind, arg, result = op["kind"], op.get("arg"), op.get("result")
    if kind == "set":
        return True, arg
    if kind == "get":  # a G2 GET of an absent key answers an empty value
        return result == (state if state is not None else b""), state
    if kind == "add":
        new = int(state or b"0") + arg
        return result == new, str(new).encode()
    if kind == "compare_set":
        expected, desired = arg
        if state is None:
            if expected == b"":
                return result == desired, desired
            return result == expected, state
        if state == expected:
            return result == desired, desired
        return result == state, state
    if kind == "delete":
        return result == (1 if state is not None else 0), None
    if kind == "wait":
        return state is not None, state
    raise ValueError(kind)


def linearizable(ops, initial=None):
    """True when some total order of `ops`, consistent with real time, is legal for the model."""
    ops = sorted(ops, key=lambda o: o["inv"])
    n = len(ops)
    full = (1 << n) - 1
    failed = set()

    def search(done, state):
        if done == full:
            return True
        if (done, state) in failed:
            return False
        pending = [i for i in range(n) if not done >> i & 1]
        horizon = min(ops[i]["res"] for i in pending)
        for i in pending:
            if ops[i]["inv"] > horizon:
                break  # sorted by invocation: nothing later can go first
            ok, nxt = apply(state, ops[i])
            if ok and search(done | 1 << i, nxt):
                return True
        failed.add((done, state))
        return False

    return search(0, initial)


def self_test():
    """The checker must reject what is not linearizable and accept what is."""
    def op(kind, arg, result, inv, res):
        return {"kind": kind, "arg": arg, "result": result, "inv": inv, "res": res}
    # A read after a completed write that misses it.
    assert not linearizable([op("set", b"a", None, 0, 1), op("get", None, b"", 2, 3)])
    # The same read overlapping the write may go either way.
    assert linearizable([op("set", b"a", None, 0, 3), op("get", None, b"", 1, 2)])
    # Two ADDs answered with the same value (what a broken combiner would do).
    assert not linearizable([op("add", 1, 1, 0, 5), op("add", 1, 1, 1, 6)])
    assert linearizable([op("add", 1, 2, 0, 5), op("add", 1, 1, 1, 6)])
    # A WAIT that returned while the key was absent the whole time.
    assert not linearizable([op("delete", None, 0, 0, 1), op("wait", None, 0, 2, 3)])
    # Stale read after a later read saw the new value.
    assert not linearizable([op("set", b"x", None, 0, 10), op("get", None, b"x", 1, 2),
                             op("get", None, b"", 3, 4)])
