# SPDX-License-Identifier: MIT
"""`ddprun report` (docs/health.md, "Seeing a job") on the events files of real runs: a worker
failure and a hang verdict (the elastic run's is in test_live_view.py). The HTML opens in
headless chromium and shows every event, asking for nothing; the Markdown has the root cause
line. Bad input: one line, a defined exit code; a truncated last line is tolerated."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import DDPRUN, main, run  # noqa: E402
import cdp  # noqa: E402
import test_multinode as mn  # noqa: E402

ARTEFACTS = os.environ.get("VIEW_ARTEFACTS", os.getcwd())

FAIL = """import os, sys, time
if os.environ['RANK'] == '1':
    time.sleep(0.3)
    sys.exit(3)
time.sleep(30)
"""
HANG = """import time
print('one line, then silence', flush=True)
time.sleep(60)
"""


def report(*args):
    return subprocess.run([DDPRUN, "report", *args], capture_output=True, text=True, timeout=30)


def script(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def check_html_in_chromium(html_path, events_path, expect_sections):
    lines = [l for l in open(events_path) if l.strip()]
    if not cdp.find_chromium():
        print("  (no chromium: the HTML is not opened)")
        return
    browser = cdp.Browser(1200, 900)
    try:
        url = "file://" + html_path
        browser.navigate(url)
        browser.wait_for("document.readyState === 'complete'", 20)
        page = browser.evaluate("""(() => ({
          all: document.querySelectorAll('table:last-of-type tr.event').length,
          timeline: document.querySelectorAll('#timeline g.ev').length,
          sections: [...document.querySelectorAll('h2')].map(h => h.textContent),
          cause: document.getElementById('root-cause').textContent}))()""")
        assert page["all"] == len(lines), (page, len(lines))  # every event, one row each
        assert page["timeline"] > 0, page
        for s in expect_sections:
            assert s in page["sections"], (s, page)
        assert browser.requested_urls() == [url], browser.requested_urls()
        browser.screenshot(html_path.replace(".html", ".png"))
        return page
    finally:
        browser.close()


def test_report_of_a_failed_run(tmp):
    events = os.path.join(tmp, "fail.jsonl")
    r = run(["--nproc-per-node", 2, "--events", events, script(tmp, "fail.py", FAIL)], timeout=60)
    assert r.rc == 3, r
    html = os.path.join(ARTEFACTS, "report-failure.html")
    out = report(events, "-o", html)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out
    page = check_html_in_chromium(html, events, ["Failures", "Ranks", "Timeline"])
    if page:
        assert "rank 1 (local rank 1, attempt 0) exited with code 3" in page["cause"], page
    md = report(events, "--format", "md")
    assert md.returncode == 0, md
    assert "**Root cause:** rank 1 (local rank 1, attempt 0) exited with code 3" in md.stdout, md.stdout
    assert "| 0 | 1 | 1 |" in md.stdout and "| 3 |" in md.stdout, md.stdout


def test_report_of_a_hung_run(tmp):
    events = os.path.join(tmp, "hang.jsonl")
    r = run(["--nproc-per-node", 2, "--hang-timeout", 2, "--log-dir", os.path.join(tmp, "logs"),
             "--events", events, script(tmp, "hang.py", HANG)], timeout=90)
    assert r.rc == 75, r
    html = os.path.join(ARTEFACTS, "report-hang.html")
    assert report(events, "-o", html).returncode == 0
    check_html_in_chromium(html, events, ["Hangs, stacks and stragglers"])
    md = report(events, "--format", "md").stdout
    assert "**Root cause:** hang verdict" in md, md
    assert "stacks saved: " in md and "stacks.txt" in md, md


def test_bad_input_is_one_line_with_a_defined_code(tmp):
    missing = report(os.path.join(tmp, "nope.jsonl"))
    assert missing.returncode == 66 and missing.stderr.count("\n") == 1, missing
    assert missing.stderr.startswith("ddprun report: cannot read "), missing
    garbage = script(tmp, "garbage.jsonl", '{"event":"launch","time":1}\nhello\n{"event":"summary"}\n')
    bad = report(garbage)
    assert bad.returncode == 65, bad
    assert bad.stderr == f"ddprun report: {garbage}: line 2 is not an event (a JSON object with \"event\")\n", bad
    empty = report(script(tmp, "empty.jsonl", ""))
    assert empty.returncode == 65 and "no events" in empty.stderr, empty
    cut = script(tmp, "cut.jsonl", '{"event":"launch","time":1,"run_id":"r"}\n{"event":"summ')
    ok = report(cut, "--format", "md")
    assert ok.returncode == 0 and "last line cut short" in ok.stdout, ok
    assert "**Root cause:** unknown" in ok.stdout, ok
    unwritable = report(cut, "-o", os.path.join(tmp, "no", "such", "dir", "r.html"))
    assert unwritable.returncode == 73 and unwritable.stderr.count("\n") == 1, unwritable
    usage = report()
    assert usage.returncode == 2 and usage.stderr.startswith("ddprun report: "), usage
    fmt = report(cut, "--format", "pdf")
    assert fmt.returncode == 2, fmt
    # Wrong-typed fields and a line nested 100,000 deep: bad lines with their number (65), not
    # an internal error (70) or a crash.
    typed = report(script(tmp, "typed.jsonl", '{"event":"launch","time":1}\n'
                          '{"event":"worker_start","time":2,"rank":"0"}\n'))
    assert typed.returncode == 65, typed
    assert typed.stderr.endswith('line 2: "rank" is a string, not a number\n'), typed
    null_time = report(script(tmp, "null.jsonl", '{"event":"launch","time":null}\n'))
    assert null_time.returncode == 65 and "line 1:" in null_time.stderr, null_time
    deep = report(script(tmp, "deep.jsonl", '{"event":"launch","time":1}\n{"event":"x","a":' +
                         "[" * 100000 + "]" * 100000 + "}\n"))
    assert deep.returncode == 65, deep
    assert "line 2 is nested deeper than 64 levels" in deep.stderr, deep
    # A file name with controls (breaker of 2026-12-07): the line shows them, never acts on them.
    hostile = report(os.path.join(tmp, "a\x1b[2J\x07\u202eb.jsonl"))
    assert hostile.returncode == 66, hostile
    assert not any(c in hostile.stderr for c in "\x1b\x07\u202e"), hostile
    assert "a^[[2J^G" in hostile.stderr, hostile



def test_report_never_overwrites_its_events_file(tmp):
    """-o naming the events file, or a link to it: refused (2, one line), the events kept."""
    events = script(tmp, "ev.jsonl", '{"event":"launch","time":1,"run_id":"r"}\n')
    before = open(events).read()
    same = report(events, "-o", events)
    assert same.returncode == 2 and same.stderr.count("\n") == 1, same
    assert "is the events file" in same.stderr, same
    link = os.path.join(tmp, "report.html")
    os.symlink("ev.jsonl", link)
    linked = report(events, "-o", link)
    assert linked.returncode == 2, linked
    assert open(events).read() == before
    other = report(events, "-o", os.path.join(tmp, "r.html"))
    assert other.returncode == 0, other


def test_an_endless_line_is_refused_once_16_mib_are_read(tmp):
    """/dev/zero has no newline and no end: the report stops at 16 MiB (65, line 1)."""
    t0 = time.monotonic()
    endless = subprocess.run([DDPRUN, "report", "/dev/zero"], capture_output=True, text=True,
                             timeout=20)
    assert endless.returncode == 65, endless
    assert endless.stderr.endswith("line 1 is longer than 16 MiB: not an event\n"), endless
    print(f"  /dev/zero refused in {time.monotonic() - t0:.2f} s", flush=True)
    wrapped = report(script(tmp, "wrap.jsonl", '{"event":"launch","time":1}\n'
                            '{"event":"worker_start","attempt":4294967295,"rank":0}\n'))
    assert wrapped.returncode == 65 and "line 2:" in wrapped.stderr, wrapped

RECOVER = """import os, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    import json
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": {"message": "RuntimeError: first attempt fails",
                               "extraInfo": {"py_callstack": "Traceback: line 1", "timestamp": "1"}}}, f)
    sys.exit(5)
"""


def test_report_of_a_run_that_failed_once_and_recovered(tmp):
    events = os.path.join(tmp, "recover.jsonl")
    r = run(["--nproc-per-node", 1, "--max-restarts", 1, "--events", events,
             script(tmp, "recover.py", RECOVER)], timeout=60)
    assert r.rc == 0, r
    md = report(events, "--format", "md").stdout
    assert "**Root cause:** none: the job succeeded after 1 failed attempt(s); the last failure: " \
           "rank 0 (local rank 0, attempt 0) exited with code 5: RuntimeError: first attempt fails" \
        in md, md
    assert "### Failed attempts" in md, md
    # The launch event's command line is not in the report (as /status leaves it out).
    assert "recover.py\"]" not in md and "argv" not in md, md


# Rank 1 fails in attempt 0 with an error file (its message holds an OSC title sequence); ddprun
# stops rank 0 (SIGTERM); attempt 1 succeeds.
SECONDARY = r"""import json, os, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    if os.environ["RANK"] == "1":
        time.sleep(0.5)
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": "ValueError: bad shard 7 \x1b]0;owned\x07",
                                   "extraInfo": {"py_callstack": "Traceback (most recent call last):\n"
                                                 "  File \"train.py\", line 12, in step",
                                                 "timestamp": "1"}}}, f)
        sys.exit(5)
    time.sleep(30)
"""


def test_report_groups_the_ranks_a_failure_stopped_under_it(tmp):
    """Per attempt the root cause first (rank, exit, message, traceback from its error file), the
    rank ddprun stopped under it as "stopped because of rank 1"; the job recovered, attempt 0's
    cause is still there. The summary event carries the attempt's cause and the traceback."""
    import json
    events = os.path.join(tmp, "secondary.jsonl")
    r = run(["--nproc-per-node", 2, "--max-restarts", 1, "--events", events,
             script(tmp, "secondary.py", SECONDARY)], timeout=60)
    assert r.rc == 0, r
    summary = [json.loads(l) for l in open(events) if '"summary"' in l][-1]
    first = [a for a in summary["attempts"] if a["attempt"] == 0][0]
    assert first["root_cause_rank"] == 1 and first["cause"] == "rank 1 failed with exit code 5", first
    failed = [w for w in first["workers"] if w["rank"] == 1][0]
    assert failed["error_traceback"].endswith("line 12, in step"), failed
    md = report(events, "--format", "md")
    assert md.returncode == 0, md
    text = md.stdout
    # Attempt 0's cause, its message (escapes shown, never raw) and traceback, then the rank it
    # stopped, in this order.
    order = ["- attempt 0: rank 1 (local rank 1) exited with code 5 (root cause)\n",
             "  ValueError: bad shard 7 ^[]0;owned^G\n",
             "  Traceback (most recent call last):\n",
             "line 12, in step",
             "  stopped because of rank 1:\n\n",
             "  - rank 0 (local rank 0) was killed by SIGTERM (stopped by ddprun)\n"]
    at = [text.find(o) for o in order]
    assert all(a >= 0 for a in at) and at == sorted(at), (at, text)
    assert "\x1b" not in text and "\x07" not in text, text
    assert "- attempt 1" not in text, text  # it succeeded
    html_path = os.path.join(ARTEFACTS, "report-secondary.html")
    assert report(events, "-o", html_path).returncode == 0
    html = open(html_path).read()
    assert "\x1b" not in html, html
    page = check_html_in_chromium(html_path, events, ["Failed attempts", "Ranks"])
    if page:
        browser = cdp.Browser(1200, 900)
        try:
            browser.navigate("file://" + html_path)
            browser.wait_for("document.readyState === 'complete'", 20)
            got = browser.evaluate("""(() => {
              const a = document.querySelector('.attempt-failure[data-attempt="0"]');
              return {root: a.querySelector('.root').dataset.rank,
                      because: a.querySelector('.consequences p').textContent,
                      stopped: [...a.querySelectorAll('li.consequence')].map(l => l.dataset.rank),
                      message: a.querySelector('pre.message').textContent};
            })()""")
        finally:
            browser.close()
        assert got["root"] == "1" and got["stopped"] == ["0"], got
        assert got["because"] == "stopped because of rank 1:", got
        assert got["message"].startswith("ValueError: bad shard 7"), got
    else:
        assert '<span class="root" data-rank="1">' in html, html
        assert '<li class="consequence" data-rank="0">' in html, html


TWO_NODES = r"""import json, os, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    if os.environ["RANK"] == "3":
        time.sleep(1)
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": "ValueError: loss is NaN",
                                   "extraInfo": {"py_callstack": "Traceback: line 5",
                                                 "timestamp": "1"}}}, f)
        sys.exit(3)
    time.sleep(30)
"""


def test_report_of_two_nodes_names_the_other_nodes_rank(tmp):
    """Two static nodes of 2 ranks: rank 3 (node 1) fails in attempt 0, the job recovers. Node 1's
    report: rank 3 with its message, rank 2 stopped because of it. Node 0's: the cause in the
    decision's words (node 1's rank 3; the summary event's per-attempt `cause`), its ranks 0 and
    1 stopped because of it."""
    port = mn.free_port()
    w = script(tmp, "two.py", TWO_NODES)
    nodes = [mn.Node(tmp, f"node{k}", ["--nnodes", 2, "--node_rank", k, "--nproc_per_node", 2,
                                      "--master_addr", "127.0.0.1", "--master_port", port,
                                      "--max-restarts", 1, "--rdzv_conf", mn.FAST, w])
             for k in (0, 1)]
    rcs = [n.wait(90) for n in nodes]
    assert rcs == [0, 0], nodes
    one = report(nodes[1].events, "--format", "md").stdout
    order = ["- attempt 0: rank 3 (local rank 1) exited with code 3 (root cause)\n",
             "  ValueError: loss is NaN\n", "  stopped because of rank 3:\n\n",
             "  - rank 2 (local rank 0) was killed by SIGTERM (stopped by ddprun)\n"]
    at = [one.find(o) for o in order]
    assert all(a >= 0 for a in at) and at == sorted(at), (at, one)
    zero = report(nodes[0].events, "--format", "md").stdout
    head = zero.find("- attempt 0: node 1 (")
    under = zero.find("  stopped because of node 1 (")
    assert 0 <= head < under, zero
    assert "rank 3" in zero[head:zero.find("\n", head)], zero
    for rank in (0, 1):
        line = f"  - rank {rank} (local rank {rank}) was killed by SIGTERM (stopped by ddprun)\n"
        assert zero.find(line) > under, (line, zero)
    assert "- attempt 1" not in zero and "- attempt 1" not in one, (zero, one)


def test_report_memory_is_bounded_whatever_the_file_size(tmp):
    """A 32 MiB events file (the old report held the text and ~26 bytes per input byte): peak RSS
    stays under the file's size, and the tables say what was left out."""
    path = os.path.join(tmp, "big.jsonl")
    line = ('{"event":"worker_start","time":%d.5,"rank":%d,"local_rank":0,"attempt":%d,"pid":%d,'
            '"padding":"' + "x" * 40 + '"}\n'
            '{"event":"worker_exit","time":%d.9,"rank":%d,"local_rank":0,"attempt":%d,"pid":%d,'
            '"exit_code":0,"terminated_by_ddprun":false,"oom_killed":false}\n')
    with open(path, "w") as f:
        f.write('{"event":"launch","time":1,"run_id":"big","program":"x"}\n')
        i = 0
        while f.tell() < 32 << 20:
            f.write("".join(line % (i + k, (i + k) % 8, (i + k) // 8, 1000 + i + k, i + k,
                                    (i + k) % 8, (i + k) // 8, 1000 + i + k) for k in range(1000)))
            i += 1000
        f.write('{"event":"summary","time":%d,"exit_code":0,"attempts":[]}\n' % (i + 2))
    size = os.path.getsize(path)
    out = os.path.join(tmp, "big.html")
    t0 = time.monotonic()
    measured = subprocess.run(
        [sys.executable, "-c", "import resource, subprocess, sys; "
         "r = subprocess.run(sys.argv[1:]); "
         "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
         DDPRUN, "report", path, "-o", out], capture_output=True, text=True, timeout=120)
    rc, peak_kib = map(int, measured.stdout.split())
    print(f"  report of {size / (1 << 20):.0f} MiB: exit {rc}, peak RSS {peak_kib / 1024:.1f} MiB, "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    assert rc == 0, measured
    assert peak_kib * 1024 < 28 << 20, peak_kib  # the file is 32 MiB
    html = open(out).read()
    assert "left out of the report" in html
    assert "none: the job succeeded" in html


if __name__ == "__main__":
    main(globals())
