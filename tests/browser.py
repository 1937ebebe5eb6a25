"""A real browser for the page tests: headless Chromium driven through its DevTools protocol over a
pipe (--remote-debugging-pipe: JSON messages ending in NUL on file descriptors 3 and 4), so no
WebSocket client or browser-driver package is needed.

Chromium is Debian's `chromium` package (tests/run.sh installs it with apt-get where it may), or the
binary MOE_HARNESS_CHROMIUM_BIN names. `load(url)` returns what a user's browser would have shown:
console errors, uncaught exceptions, log errors, every URL the page asked for, and a screenshot.

    python tests/browser.py screenshot PAGE.html OUT.png [WIDTH HEIGHT]   # e.g. docs/view.png
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_BIN = os.environ.get("MOE_HARNESS_CHROMIUM_BIN", "chromium")
TIMEOUT_S = 60.0


def missing_chromium() -> str | None:
    """None when Chromium can be started, else what to do about it."""
    if shutil.which(CHROMIUM_BIN) is None:
        return (f"no Chromium ({CHROMIUM_BIN!r} not found): apt-get install -y chromium (tests/run.sh does it as "
                "root or with password-less sudo), or point MOE_HARNESS_CHROMIUM_BIN at a Chromium binary")
    return None


@dataclass
class PageLoad:
    console_errors: list[str] = field(default_factory=list)  # console.error / assert, uncaught exceptions, log errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    screenshot_png: bytes = b""


class Browser:
    """One headless Chromium; `with Browser() as b: b.load(url)`; `b.evaluate(js)` runs in the loaded page."""

    def __init__(self, width: int = 1500, height: int = 1100):
        self.width, self.height = width, height
        self._profile = tempfile.mkdtemp(prefix="moe-harness-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        flags = ["--headless", "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
                 "--disable-gpu", "--disable-extensions", "--disable-background-networking", "--mute-audio",
                 f"--user-data-dir={self._profile}", f"--window-size={width},{height}"]
        if os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        # a small Python launcher puts the pipes where Chromium reads (3) and writes (4) the protocol, then
        # becomes Chromium (a shell cannot: dash redirects only file descriptors 0-9)
        launcher = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
                    "[os.close(fd) for fd in {r, w} - {3, 4}]; os.execvp(sys.argv[3], sys.argv[3:])")
        self.process = subprocess.Popen(
            [sys.executable, "-c", launcher, str(to_browser_r), str(from_browser_w), CHROMIUM_BIN, *flags,
             "about:blank"],
            pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        self._session: str | None = None

    # -- the protocol
    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def _read(self) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                err = self.process.stderr.read().decode(errors="replace")[-2000:] if self.process.stderr else ""
                raise RuntimeError(f"Chromium closed the protocol pipe: {err}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _wait_for(self, method: str) -> dict:
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(i)
            self._events.append(self._read())

    def call(self, method: str, params: dict | None = None) -> dict:
        """A protocol command in the page's session."""
        return self._send(method, params, self._session)

    # -- what the tests use
    def load(self, url: str) -> PageLoad:
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        self._events.clear()
        self.call("Page.navigate", {"url": url})
        self._wait_for("Page.loadEventFired")
        result = PageLoad()
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                result.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                result.console_errors.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                result.console_errors.append(params["entry"].get("text", ""))
            elif method == "Network.requestWillBeSent":
                result.requests.append(params["request"]["url"])
        result.screenshot_png = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
        return result

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the loaded page (JSON-able)."""
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression[:80]}: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def close(self) -> None:
        try:
            self._send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()  # our own child, by its process object
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "screenshot":
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    width, height = (int(argv[3]), int(argv[4])) if len(argv) >= 5 else (1500, 1100)
    with Browser(width, height) as browser:
        page = browser.load(Path(argv[1]).resolve().as_uri())
    Path(argv[2]).write_bytes(page.screenshot_png)
    print(f"{argv[2]}: {len(page.screenshot_png)} bytes; console errors: {page.console_errors or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
