"""A timed window closes when the grader sees the outputs, not when the worker answers:
a worker whose code answers early (the toy stand-in for a patched synchronize) is timed
until its work shows, and an honest worker pays one look, like the round trip."""
import time
from pathlib import Path

import pytest
import torch

from grader.sandbox import Confinement, Submission, SubmissionError, proxy
from grader.sandbox.proxy import SETTLE_FACTOR, SETTLE_MIN_S

TOY = Path(__file__).parent.parent / "toy" / "submissions"


@pytest.fixture
def timed_batch():
    made = []

    def make(name):
        conf = Confinement.prepare("cpu", [], want_uid=False)
        sub = Submission(TOY / name, ["add_into", "add_into_much_later", "echo"], torch.device("cpu"), conf,
                         timeout=60)
        made.append(sub)
        x, y = sub.exchange.zeros((1024,), torch.float32), sub.exchange.zeros((1024,), torch.float32)

        def refill():
            x.zero_()
            y.normal_()
        sub.echo(0)                                  # imported before anything is timed
        return sub, x, y, refill
    yield make
    for sub in made:
        sub.close()


@pytest.mark.slow
def test_an_early_answer_does_not_stop_the_clock(timed_batch, monkeypatch):
    sub, x, y, refill = timed_batch("answers_early.py")
    answered = sub.time_calls("add_into", [((x, y), {})], refill=refill)
    assert answered < 0.3, "the toy must answer before its thread adds, or this test shows nothing"
    time.sleep(0.6)                                      # that late write lands before the next refill
    monkeypatch.setattr(proxy, "SETTLE_MIN_S", 5.0)      # room to wait for the late write
    seen = sub.time_calls("add_into", [((x, y), {})], refill=refill, settled=lambda: torch.equal(x, y))
    assert seen >= 0.4, f"the window closed at {seen:.3f} s, before the late write landed"
    assert torch.equal(x, y)


@pytest.mark.slow
def test_an_answer_far_too_early_closes_the_window_without_the_outputs(timed_batch):
    """The grader looks at the outputs for at most SETTLE_FACTOR times the answer's own time (and
    SETTLE_MIN_S), then closes the window without them, for the caller's check to fail. The limit
    is found from the looks themselves: the first comes just after the answer, the last just
    before the window closes, so that a busy machine's slower answer moves the limit with it."""
    sub, x, y, refill = timed_batch("answers_early.py")
    looks = []

    def settled():
        looks.append(time.perf_counter())
        return torch.equal(x, y)
    seconds = sub.time_calls("add_into_much_later", [((x, y), {})], refill=refill, settled=settled)
    assert not torch.equal(x, y), "the window waited for work that landed 5 s after the answer"
    # at most the answer's time: the window began no later than its end less `seconds`
    answered = seconds - (looks[-1] - looks[0])
    limit = max(SETTLE_MIN_S, SETTLE_FACTOR * answered)
    assert SETTLE_MIN_S <= seconds <= limit + 0.1, (
        f"the window closed at {seconds:.3f} s; the answer took at most {answered:.3f} s, so its limit was {limit:.3f} s")


@pytest.mark.slow
def test_an_honest_worker_is_seen_at_the_first_look(timed_batch):
    sub, x, y, refill = timed_batch("good.py")
    looks = []

    def settled():
        looks.append(1)
        return torch.equal(x, y)
    seconds = sub.time_calls("add_into", [((x, y), {})], refill=refill, settled=settled)
    assert len(looks) == 1 and seconds < SETTLE_MIN_S + 1.0


@pytest.mark.slow
def test_outputs_that_never_show_close_the_window_for_the_check_to_fail(timed_batch):
    sub, x, y, refill = timed_batch("good.py")
    seconds = sub.time_calls("add_into", [((x, y), {})], refill=refill, settled=lambda: False)
    assert SETTLE_MIN_S <= seconds < SETTLE_MIN_S + 2.0


@pytest.mark.slow
def test_a_timed_batch_that_raises_leaves_the_worker_answering_in_step(timed_batch):
    """A submission that raises inside a timed batch (a kernel that does not compile for one
    shape) fails that timing alone: each later call gets its own answer, never what the failed
    batch left unread, so a later correct call is not failed for it."""
    sub, x, y, refill = timed_batch("good.py")
    short = sub.exchange.zeros((512,), torch.float32)
    with pytest.raises(SubmissionError, match="shapes differ"):
        sub.time_calls("add_into", [((x, short), {})], refill=refill)
    assert sub.echo(5) == 5
    assert sub.echo("again") == "again"
    sub.time_calls("add_into", [((x, y), {})], refill=refill)
    assert torch.equal(x, y)
    assert sub._worker.frozen, "between calls the worker's threads are stopped, after a failed batch too"


@pytest.mark.slow
def test_a_series_maps_its_inputs_once_and_checks_every_window(timed_batch):
    """time_repeats: each window gets inputs refilled after the worker mapped them and its own
    check while the worker is frozen; the worker keeps the mapping between the windows only."""
    sub, x, y, refill = timed_batch("good.py")
    seen = []

    def check(seconds):
        assert sub._worker.frozen, "a window's outputs are checked with the worker stopped"
        seen.append((seconds, torch.equal(x, y)))
    times = sub.time_repeats("add_into", [((x, y), {})], 4, refill=refill, settled=lambda: torch.equal(x, y),
                             after=check)
    assert len(times) == 4 and [s for s, _ in seen] == times and all(ok for _, ok in seen)
    assert sub.echo(3) == 3, "after the series the worker answers in step"


@pytest.mark.slow
def test_a_series_cut_short_by_its_check_leaves_nothing_mapped(timed_batch):
    """A check that fails in the middle of a series ends it: the worker is told to let go of
    the inputs it kept, and answers the next call in step."""
    sub, x, y, refill = timed_batch("good.py")
    windows = []
    path = sub.exchange._files[x.untyped_storage().data_ptr()][0]
    mapped = []

    def check(seconds):
        windows.append(seconds)
        mapped.append(Path(path).name in Path(f"/proc/{sub._worker.proc.pid}/maps").read_text())
        if len(windows) == 2:
            raise AssertionError("wrong output")
    with pytest.raises(AssertionError, match="wrong output"):
        sub.time_repeats("add_into", [((x, y), {})], 5, refill=refill, after=check)
    assert len(windows) == 2 and mapped == [True, True], "between windows the worker keeps the inputs mapped"
    assert Path(path).name not in Path(f"/proc/{sub._worker.proc.pid}/maps").read_text(), \
        "a series cut short leaves none of the grader's memory mapped in the worker"
    assert sub.echo("next") == "next"
    sub.time_calls("add_into", [((x, y), {})], refill=refill)
    assert torch.equal(x, y) and sub._worker.frozen
