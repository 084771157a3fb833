# SPDX-License-Identifier: MIT
"""The chaos harness's output a person reads: per fault type, how often it was skipped, recovered
from, ended the job correctly or violated an invariant, and the time to recover (p50/p99/max);
runs (chunks, a slice's replays) merged into one table. Pure functions of the results."""
import statistics

COUNTS = ("count", "skipped", "recovered", "ended_correctly", "violated")


def by_type(results, violations):
    """RESULTS: one {index, type, outcome, ttr} per fault. Each fault counts once: skipped,
    violated (an invariant broken at it, or no recovery within its bound), recovered (then its
    time to recover is kept) or ended (the job ended with the codes its faults explain)."""
    out = {}
    violated = {v["fault_index"] for v in violations}
    for r in results:
        t = out.setdefault(r["type"], {**{k: 0 for k in COUNTS}, "ttr": []})
        t["count"] += 1
        if r["outcome"] == "skipped":
            t["skipped"] += 1
        elif r["index"] in violated or r["outcome"] not in ("recovered", "ended"):
            t["violated"] += 1
        elif r["outcome"] == "recovered":
            t["recovered"] += 1
            t["ttr"].append(r["ttr"])
        else:
            t["ended_correctly"] += 1
    for t in out.values():
        _percentiles(t)
    return out


def _percentiles(t):
    ttr = t["ttr"] = sorted(t["ttr"])  # every time to recover, so that runs can be merged
    t["ttr_p50"] = round(statistics.median(ttr), 2) if ttr else None
    t["ttr_p99"] = round(ttr[min(len(ttr) - 1, int(0.99 * len(ttr)))], 2) if ttr else None
    t["ttr_max"] = round(ttr[-1], 2) if ttr else None


def merge(summaries):
    """Several runs' summaries (run_chaos.py --json) as one: counts added, times pooled."""
    types = {}
    for s in summaries:
        for name, t in s["by_type"].items():
            m = types.setdefault(name, {**{k: 0 for k in COUNTS}, "ttr": []})
            for k in COUNTS:
                m[k] += t[k]
            m["ttr"] += t["ttr"]
    for t in types.values():
        _percentiles(t)
    first = summaries[0] if summaries else {}
    codes = {}
    for s in summaries:
        for c, n in s["exit_codes"].items():
            codes[c] = codes.get(c, 0) + n
    return {"faults": sum(s["faults"] for s in summaries),
            "seed": ",".join(str(s["seed"]) for s in summaries),
            "mode": first.get("mode"), "topology": first.get("topology"),
            "nodes": "/".join(sorted({str(s["nodes"]) for s in summaries})),
            "episodes": sum(s["episodes"] for s in summaries),
            "seconds": round(sum(s["seconds"] for s in summaries), 1),
            "checkpoints_checked": sum(s.get("checkpoints_checked", 0) for s in summaries),
            "violations": [v for s in summaries for v in s["violations"]],
            "by_type": types, "exit_codes": codes}


def markdown(summary):
    rows = ["| fault | count | skipped | recovered | ended correctly | violated | TTR p50 | p99 | max |",
            "|---|---|---|---|---|---|---|---|---|"]
    for t, s in sorted(summary["by_type"].items()):
        rows.append(f"| {t} | {s['count']} | {s['skipped']} | {s['recovered']} | "
                    f"{s['ended_correctly']} | {s['violated']} | {s['ttr_p50']} | {s['ttr_p99']} | "
                    f"{s['ttr_max']} |")
    head = (f"seed {summary['seed']}, {summary['faults']} faults, mode {summary['mode']}, "
            f"{summary['nodes']} node slots ({summary['topology']}), {summary['episodes']} episodes, "
            f"{summary['seconds']} s, {summary.get('checkpoints_checked', 0)} checkpoints checked, "
            f"{len(summary['violations'])} violations")
    return head + "\n\n" + "\n".join(rows) + "\n"
