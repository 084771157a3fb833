# SPDX-License-Identifier: MIT
"""C1 controls and bidi overrides in job text (issue 36, "Security" 1; docs/health.md, "Job text
on a terminal"). A worker's error message holds an 8-bit CSI (U+009B), DEL, a right-to-left
override (U+202E) and an isolate pair (U+2066, U+2069): the --events lines (here `--events -`,
ddprun's stdout) and /status carry them as \\u escapes (valid JSON, the same text once parsed,
no raw byte a terminal acts on), and the dashboard in a real headless chromium shows them as
`\\u202e` text that cannot reorder the text around it."""
import json
import os
import signal
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
import cdp  # noqa: E402
from harness import clean_env, main, start, stop, wait_until  # noqa: E402

ARTEFACTS = os.environ.get("VIEW_ARTEFACTS", os.getcwd())
NASTY = "csi\u009b31m del\u007f rlo\u202egnp.exe iso\u2066x\u2069 end"
RAW = [b"\xc2\x9b", b"\x7f", b"\xe2\x80\xae", b"\xe2\x81\xa6", b"\xe2\x81\xa9"]

JOB = r"""
import json, os, sys, time
marker = sys.argv[1]
if os.environ["RANK"] == "0":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": {"message": %r, "extraInfo": {"py_callstack": "tb", "timestamp": "1"}}}, f)
deadline = time.monotonic() + 60
while not os.path.exists(marker) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(4 if os.environ["RANK"] == "0" else 0)
""" % NASTY


def test_events_and_status_escape_c1_and_bidi_and_the_page_shows_them(tmp):
    job = os.path.join(tmp, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    marker = os.path.join(tmp, "go")
    proc = start(["--nproc-per-node", "2", "--status-port", "0", "--status-linger", "60",
                  "--events", "-", job, marker], env=clean_env())
    port = []
    lines = []
    try:
        # The events go to stdout: read them as bytes from the pipe's descriptor.
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        raw = bytearray()

        def read_more():
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            raw.extend(chunk)

        def have_port():
            read_more()
            for line in bytes(raw).split(b"\n"):
                if line.startswith(b"{") and b'"event":"status"' in line:
                    port[:] = [json.loads(line)["port"]]
            return bool(port)
        wait_until(have_port, 30, "the status event")
        base = f"http://127.0.0.1:{port[0]}"
        with urllib.request.urlopen(base + "/status", timeout=5) as r:
            assert r.status == 200  # a viewer: the end is served for the linger
        open(marker, "w").close()
        body = {}

        def ended():
            read_more()
            with urllib.request.urlopen(base + "/status", timeout=5) as r:
                body["raw"] = r.read()
            return json.loads(body["raw"]).get("job", {}).get("state") == "failed"
        wait_until(ended, 60, "the final state")
        # /status: the message in \u escapes, the same text once parsed.
        for b in RAW:
            assert b not in body["raw"], (b, body["raw"][-2000:])
        assert b"\\u202e" in body["raw"] and b"\\u009b" in body["raw"]
        status = json.loads(body["raw"])
        assert NASTY in json.dumps(status, ensure_ascii=False), status["job"]
        # The dashboard: shown as text, no override reaches the page's text.
        if cdp.find_chromium():
            browser = cdp.Browser(1200, 800)
            try:
                browser.navigate(base + "/")
                browser.wait_for("!!document.getElementById('ended')", 30, "the end banner")
                text = browser.evaluate("document.body.innerText")
                for ch in "\u009b\u007f\u202e\u2066\u2069":
                    assert ch not in text, (hex(ord(ch)), text[-500:])
                banner = browser.evaluate("document.getElementById('ended').textContent")
                assert ("csi\\u009b31m del\\u007f rlo\\u202egnp.exe iso\\u2066x\\u2069 end"
                        in banner), banner
                browser.screenshot(os.path.join(ARTEFACTS, "dashboard-bidi.png"))
            finally:
                browser.close()
        proc.send_signal(signal.SIGINT)  # ends the linger
        proc.wait(timeout=30)
        assert proc.returncode == 4, proc.returncode
        os.set_blocking(fd, True)
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            raw.extend(chunk)
    finally:
        stop(proc)
    text = bytes(raw)
    for b in RAW:
        assert b not in text, (b, text[-2000:])
    for line in text.split(b"\n"):
        if line.startswith(b"{"):
            lines.append(json.loads(line))  # every event line is still valid JSON
    carried = [e for e in lines if NASTY in json.dumps(e, ensure_ascii=False)]
    assert carried, [e["event"] for e in lines]
    print(f"  {len(lines)} events, {len(carried)} carry the message ({carried[0]['event']})",
          flush=True)


if __name__ == "__main__":
    main(globals())
