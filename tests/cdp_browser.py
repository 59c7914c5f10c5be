"""A headless Chromium driven over the DevTools protocol on a pipe (no port, no extra package).

Chromium's ``--remote-debugging-pipe`` reads protocol messages on fd 3 and writes replies on fd 4,
each a JSON object ended by a NUL byte. That is all a test needs to load a page with the network
off, see every request it makes, read the DOM after it rendered, and take a screenshot, with the
browser Debian ships (``chromium``), never a browser a tool downloads.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

#: What works on a root-run, network-less CI machine (the flags Debian's chromium needs there).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    # belt and braces: nothing can leave even if the page tried
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


def find_chromium() -> str | None:
    """The Chromium executable: $FORENSICS_CHROMIUM, else chromium / chromium-browser / chrome."""
    env = os.environ.get("FORENSICS_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One Chromium process and one page (a flat-mode session on a new target)."""

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="forensics-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()

        def _fds() -> None:  # in the child: the pipes become fds 3 (commands) and 4 (replies)
            os.dup2(cmd_r, 3)
            os.dup2(res_w, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile.name}", "--remote-debugging-pipe",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_fds, pass_fds=(3, 4),
        )
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    # -- protocol -------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._cmd_w, json.dumps(message).encode() + b"\0")

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from chromium")
            ready, _, _ = select.select([self._res_r], [], [], left)
            if ready:
                chunk = os.read(self._res_r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium exited (code {self.proc.poll()})")
                self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, *, session: bool | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply; events read meanwhile go to ``self.events``."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session if session is not None else hasattr(self, "session"):
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str, timeout: float | None = None) -> dict[str, Any]:
        """The first event named ``method`` (already received, or the next one to arrive)."""
        for event in self.events:
            if event["method"] == method:
                return event
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            event = self._read(deadline)
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    return event

    # -- page helpers ---------------------------------------------------------------------------

    def open(self, url: str, *, width: int = 1240, height: int = 1754) -> None:
        """Load ``url`` with the network emulated offline and every request recorded."""
        for domain in ("Page", "Network", "Log", "Runtime"):
            self.call(f"{domain}.enable")
        self.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1,
                  uploadThroughput=-1)
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (returned by value)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def requests(self) -> list[str]:
        """URLs of every request the page made (from Network.requestWillBeSent)."""
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def log_entries(self) -> list[dict[str, Any]]:
        """Console and browser log entries (CSP violations, failed loads, script errors)."""
        out = [e["params"]["entry"] for e in self.events if e["method"] == "Log.entryAdded"]
        out += [{"level": e["params"]["type"], "text": str(e["params"].get("args"))}
                for e in self.events if e["method"] == "Runtime.consoleAPICalled"]
        out += [{"level": "error", "text": str(e["params"].get("exceptionDetails"))}
                for e in self.events if e["method"] == "Runtime.exceptionThrown"]
        return out

    def screenshot(self, path: Path) -> Path:
        """A PNG of the viewport (the first page at A4 proportions by default)."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def pdf(self, path: Path, *, width_in: float, height_in: float) -> Path:
        """The page printed to PDF on paper of this size (print CSS applies)."""
        data = self.call("Page.printToPDF", paperWidth=width_in, paperHeight=height_in, printBackground=True,
                         preferCSSPageSize=False)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close", session=False)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._res_r):
            with suppress(OSError):
                os.close(fd)
        self._profile.cleanup()


@contextmanager
def chromium(executable: str) -> Iterator[Browser]:
    """A browser for the length of a ``with`` block; always closed."""
    browser = Browser(executable)
    try:
        yield browser
    finally:
        browser.close()
