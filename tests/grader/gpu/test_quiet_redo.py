"""A timing made again because foreign work ran in its window is the neighbours' cost, as a wait
for a quiet GPU is: QuietGpu keeps its seconds apart (redone_s), the test's figures carry them
(gpu_quiet_redo_s), and validate leaves them out of an area's budget. NVML is stood in for by
the window's own readings: no GPU is needed to count seconds."""
import time

import pytest

from grader.gpu import quiet as gpu_quiet
from grader.gpu.quiet import Activity


class Noisy(gpu_quiet.QuietGpu):
    """A GPU quiet before each window, with a foreign process busy in the first `noisy` windows."""

    def __init__(self, noisy: int):
        self.noisy, self.window_no, self.in_window = noisy, 0, False
        super().__init__(0, set)

    def wait_quiet(self, deadline, ours):
        return []

    def covered_end(self, end_us):
        pass

    def foreign(self, since_us, ours):
        return [Activity(4242, 90, 10)] if self.in_window and self.window_no <= self.noisy else []

    def run_window(self):
        self.window_no += 1
        self.in_window = True
        time.sleep(0.15)
        self.in_window = False           # the watch's last reading is made after fn returns ...
        return self.window_no


@pytest.fixture
def nvml_handle(monkeypatch):
    monkeypatch.setattr(gpu_quiet.nvml, "handle", lambda index: (object(), None))


def _seen_in_window(q: Noisy):
    """fn for measure(): the window, with the foreign process still seen at the watch's end."""
    def fn():
        got = q.run_window()
        q.in_window = q.window_no <= q.noisy        # ... so a noisy window stays noisy to it
        return got
    return fn


def test_windows_made_again_beside_foreign_work_are_counted_apart(nvml_handle):
    q = Noisy(noisy=2)
    assert q.measure(_seen_in_window(q)) == 3, "the third window was the first quiet one"
    assert q.windows == [3]
    assert 0.28 <= q.redone_s < 0.6, f"two thrown-away windows of 0.15 s, counted {q.redone_s:.3f} s"
    assert q.waited_s < 0.05


def test_a_quiet_first_window_redoes_nothing(nvml_handle):
    q = Noisy(noisy=0)
    assert q.measure(_seen_in_window(q)) == 1
    assert q.windows == [1] and q.redone_s == 0.0


def test_without_a_gpu_nothing_is_redone():
    assert gpu_quiet.Unchecked().redone_s == 0.0
