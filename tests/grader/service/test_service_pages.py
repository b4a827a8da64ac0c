"""The service's web pages in a real headless Chromium: log in with a token, upload through the
form, read the report, the leaderboard under pseudonyms, and the instructor's view."""
import shutil
import time

import pytest

import service_server as svc
from browser import CHROMIUM, Browser

NO_ECHO = (svc.TOY / "submissions/no_echo.py").read_bytes()
GOOD = (svc.TOY / "submissions/good.py").read_bytes()
BOARD = '''
[leaderboard]
enabled = true
columns = [{ name = "speed", test = "test_speed[big]", figure = "measure" }]
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    top = tmp_path_factory.mktemp("pages")
    shutil.copytree(svc.TOY, top / "toy")
    with open(top / "toy/assignment.toml", "a") as f:
        f.write(BOARD)
    course = top / "course"
    course.mkdir()
    toks = svc.tokens(course, "--add", "mia", "noah")
    toks.update(svc.tokens(course, "--instructor"))
    server = svc.start(course, "--jobs", "2", assignment=top / "toy")
    yield server, toks, top
    server.stop()


def wait_for(browser: Browser, words: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = browser.text()
        if words in text:
            return text
        time.sleep(1)
        browser.go(browser.js("location.href"))
    raise AssertionError(f"{words!r} never appeared; the page says:\n{browser.text()[-2000:]}")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian package: chromium)")
def test_a_student_uploads_and_reads_the_report_in_a_browser(served, tmp_path):
    server, toks, top = served
    noah = server.submit(toks["noah"], svc.unique(GOOD, "noah")).body["id"]
    upload = tmp_path / "my_attempt_v3.py"          # any name: it is graded as toy.py
    upload.write_bytes(NO_ECHO)
    browser = Browser(tmp_path / "profile")
    try:
        browser.go(server.url + "/")
        assert "Your token" in browser.text()
        browser.js("document.querySelector('input[name=token]').value = 'not-a-token'")
        browser.submit("form[action='/login']")
        assert "not known here" in browser.text()
        browser.js(f"document.querySelector('input[name=token]').value = {toks['mia']!r}")
        browser.submit("form[action='/login']")
        assert "Checks left this hour: 6 of 6" in browser.text()
        assert browser.js("document.cookie") == "", "the token cookie must be HttpOnly"
        browser.set_file("input[type=file]", upload)
        browser.submit("form[action='/upload']")
        assert "/submissions/" in browser.js("location.pathname")
        text = wait_for(browser, "Feedback for mia")
        assert "60.00 / 90.00" in text and "no function named 'echo'" in text and "check" in text
        browser.screenshot_of_docs(tmp_path / "report.png", "GRADER_SERVICE_SCREENSHOT")      # docs/img/ is made this way

        bad = tmp_path / "latin1.py"
        bad.write_bytes("x = 'caf\u00e9'\n".encode("latin-1"))
        browser.go(server.url + "/")
        browser.set_file("input[type=file]", bad)
        browser.submit("form[action='/upload']")
        assert "not UTF-8 text" in browser.text()

        server.wait(toks["noah"], noah)
        browser.go(server.url + "/leaderboard")
        board = browser.text()
        assert "(you)" in board and "anon-" in board and "noah" not in board
        lines = [line for line in board.splitlines() if "anon-" in line]
        assert "90.00 / 90.00" in lines[0] and "(you)" in lines[1], board        # noah's 90 ranks above mia's 60

        browser.go(server.url + "/course/summary/index.html")
        assert "only the instructor" in browser.text()
        browser.go(server.url + "/")
        browser.submit("form[action='/logout']")
        assert "Your token" in browser.text()
        browser.js(f"document.querySelector('input[name=token]').value = {toks['instructor']!r}")
        browser.submit("form[action='/login']")
        home = browser.text()
        assert "latest check" in home and "mia" in home and "noah" in home and "No class summary yet" in home
        browser.go(server.url + f"/submissions/{noah}")
        assert "Gradings" in browser.text() and "report" in browser.text()
    finally:
        browser.close()
