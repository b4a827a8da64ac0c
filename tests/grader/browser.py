"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe):
JSON messages separated by NUL bytes on file descriptors 3 (to the browser) and 4 (from it).
Enough to log in through a form, upload a file through an <input type=file>, read the page and
take a screenshot, with the standard library only."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


class Browser:
    def __init__(self, profile: Path, width: int = 1100, height: int = 900):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)
        # close_fds=False: subprocess closes inherited descriptors before preexec_fn's dup2 would
        # put the pipe on 3 and 4, so nothing may be closed (the browser is this test's own).
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def call(self, method: str, session: bool = False, timeout: float = 60, **params) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise TimeoutError(method)

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def js(self, expression: str):
        got = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                        awaitPromise=True)
        return got.get("result", {}).get("value")

    def go(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        self.wait_loaded()

    def wait_loaded(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        time.sleep(0.2)
        while time.monotonic() < deadline:
            if self.js("document.readyState") == "complete":
                return
            time.sleep(0.1)
        raise TimeoutError("page did not load")

    def submit(self, form_selector: str) -> None:
        """Submit a form as a click on its button does, and wait for the page it leads to."""
        self.js(f"document.querySelector({json.dumps(form_selector)}).requestSubmit()")
        self.wait_loaded()

    def set_file(self, selector: str, path: Path) -> None:
        doc = self.call("DOM.getDocument", session=True)["root"]["nodeId"]
        node = self.call("DOM.querySelector", session=True, nodeId=doc, selector=selector)["nodeId"]
        self.call("DOM.setFileInputFiles", session=True, nodeId=node, files=[str(path)])

    def text(self) -> str:
        return self.js("document.body.innerText") or ""

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def screenshot_of_docs(self, path: Path, keep_env: str) -> None:
        """A screenshot that must not be blank, also copied where the environment variable
        `keep_env` says (how docs/img/*.png are made)."""
        from matplotlib.image import imread     # this module stays standard-library only without it
        self.screenshot(path)
        pixels = imread(path)[..., :3]
        assert pixels.std() > 0.05 and (pixels < 0.9).any(axis=-1).mean() > 0.02, "the screenshot is blank"
        if os.environ.get(keep_env):
            shutil.copy(path, os.environ[keep_env])

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
