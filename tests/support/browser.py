"""A headless Chromium for tests that look at an HTML page as a person would.

``render(html_path, png_path)`` loads a local HTML file in Debian's ``chromium`` (``make setup`` installs it)
and returns what a reader would meet: the console errors (``console.error`` calls, uncaught exceptions, and
the browser's own error log such as a resource that failed to load), the page's visible text, a full-page
PNG screenshot, and how many ``<img>`` elements did not decode.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: the browser reads
NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4), so no network port is opened
and no Python package beyond the standard library is needed.  Every wait has a deadline.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("chromium", "chromium-headless-shell", "chromium-browser", "google-chrome")
DEADLINE_S = 60.0
VIEWPORT = (1280, 900)


class BrowserError(RuntimeError):
    pass


@dataclass
class BrowserResult:
    console_errors: list[str]
    page_text: str
    screenshot_path: Path
    broken_images: int = 0
    console_messages: list[str] = field(default_factory=list)  # every console call, for diagnosis
    first_screen_text: str = ""  # the text a reader sees before scrolling (text nodes inside the viewport)
    page_width: int = 0  # the document's scroll width in CSS pixels: wider than the viewport = a sideways scroll
    scrolls_sideways: list[str] = field(default_factory=list)  # boxes inside the page wider than themselves


def find_chromium() -> str | None:
    for name in BINARIES:
        path = shutil.which(name)
        if path:
            return path
    return None


class _Pipe:
    """The DevTools protocol on Chromium's fds 3 (commands in) and 4 (replies and events out)."""

    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int):
        self.proc, self.to_browser, self.from_browser = proc, to_browser, from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             deadline: float | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: str, deadline: float) -> dict:
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._receive(deadline))

    def _receive(self, deadline: float | None) -> dict:
        deadline = deadline or time.monotonic() + DEADLINE_S
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium exited (code {self.proc.poll()})")
                self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)


_LAUNCHER = ("import os, sys\n"
             "os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4)\n"
             "os.close(int(sys.argv[1])); os.close(int(sys.argv[2]))\n"
             "os.execv(sys.argv[3], sys.argv[3:])\n")


def _above_nine(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def _describe_console(params: dict) -> str:
    parts = []
    for arg in params.get("args", []):
        parts.append(str(arg.get("value", arg.get("description", arg.get("type")))))
    return " ".join(parts)


def _describe_exception(params: dict) -> str:
    details = params.get("exceptionDetails", {})
    exc = details.get("exception", {})
    return exc.get("description") or details.get("text", "uncaught exception")


# What the page shows: all its text, the text of the nodes drawn inside the first viewport (what a reader sees
# before scrolling), how many images did not decode, how wide the document is, and which boxes inside it scroll
# sideways (a table wider than the page, in a box of its own: named by the heading before it).
_STATE_JS = """(() => {
  const first = [], h = window.innerHeight, w = window.innerWidth;
  const walk = document.createTreeWalker(document.body || document.documentElement, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const t = n.textContent.trim();
    if (!t) continue;
    const r = document.createRange();
    r.selectNodeContents(n);
    if (Array.from(r.getClientRects()).some(b => b.top < h && b.bottom > 0 && b.left < w && b.width > 0))
      first.push(t);
  }
  const sideways = Array.from(document.querySelectorAll('*')).filter(e => {
    const s = getComputedStyle(e).overflowX;
    return (s === 'auto' || s === 'scroll') && e.scrollWidth > e.clientWidth + 1;
  }).map(e => {
    const h = e.previousElementSibling && /^H[1-6]$/.test(e.previousElementSibling.tagName)
      ? e.previousElementSibling.textContent.trim() : e.tagName;
    return h + ' (' + e.scrollWidth + ' > ' + e.clientWidth + ' px)';
  });
  return JSON.stringify({text: document.body ? document.body.innerText : '', first: first.join(' '),
    broken: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).length,
    width: document.documentElement.scrollWidth, sideways: sideways});
})()"""


def render(html_path, png_path, *, viewport: tuple[int, int] = VIEWPORT, timeout_s: float = DEADLINE_S,
           full_page: bool = True) -> BrowserResult:
    """Load ``html_path`` (a local file) headless, screenshot the whole page (``full_page=False``: the first
    screen, what fits the viewport) to ``png_path``."""
    binary = find_chromium()
    if binary is None:
        raise BrowserError("no chromium on PATH: `make setup` installs Debian's chromium "
                           "(apt-get install chromium)")
    html_path, png_path = Path(html_path).resolve(), Path(png_path)
    deadline = time.monotonic() + timeout_s
    cmd_read, cmd_write = os.pipe()
    out_read, out_write = os.pipe()
    # the child's ends move above 9, so moving them to 3 and 4 can never clobber one with the other
    cmd_read, out_write = (_above_nine(fd) for fd in (cmd_read, out_write))
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    args = [binary, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--hide-scrollbars", "--mute-audio", f"--user-data-dir={profile}",
            f"--window-size={viewport[0]},{viewport[1]}", "about:blank"]
    # the browser expects the pipe on fds 3 and 4 exactly: a tiny launcher moves them there and execs it
    # (no preexec_fn: this process may have threads, e.g. a Spark gateway's)
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(cmd_read), str(out_write), *args],
                            pass_fds=(cmd_read, out_write), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    os.close(cmd_read)
    os.close(out_write)
    pipe = _Pipe(proc, cmd_write, out_read)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"}, deadline=deadline)["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                            deadline=deadline)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            pipe.send(f"{domain}.enable", session=session, deadline=deadline)
        pipe.send("Emulation.setDeviceMetricsOverride", {"width": viewport[0], "height": viewport[1],
                                                         "deviceScaleFactor": 1, "mobile": False},
                  session=session, deadline=deadline)
        navigation = pipe.send("Page.navigate", {"url": html_path.as_uri()}, session=session, deadline=deadline)
        if navigation.get("errorText"):
            raise BrowserError(f"cannot open {html_path}: {navigation['errorText']}")
        pipe.wait_event("Page.loadEventFired", session, deadline)
        # a round trip after the load: events the page raised before it are now in pipe.events
        page = pipe.send("Runtime.evaluate", {"expression": _STATE_JS, "returnByValue": True}, session=session,
                         deadline=deadline)
        state = json.loads(page["result"]["value"])
        shot = pipe.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full_page},
                         session=session, deadline=deadline)
        png_path.parent.mkdir(parents=True, exist_ok=True)
        png_path.write_bytes(base64.b64decode(shot["data"]))
        errors, messages = [], []
        for event in pipe.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                text = _describe_console(params)
                messages.append(f"{params.get('type')}: {text}")
                if params.get("type") in ("error", "assert"):
                    errors.append(text)
            elif method == "Runtime.exceptionThrown":
                errors.append(_describe_exception(params))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                errors.append(f"{entry.get('text')} {entry.get('url', '')}".strip())
        return BrowserResult(errors, state["text"], png_path, state["broken"], messages, state["first"],
                             state["width"], state["sideways"])
    finally:
        try:
            pipe.send("Browser.close", deadline=time.monotonic() + 5)
        except (BrowserError, OSError):  # it may exit before it answers
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(cmd_write)
        os.close(out_read)
        shutil.rmtree(profile, ignore_errors=True)
