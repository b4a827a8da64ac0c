"""A timing test shares the GPU while it builds its inputs and has it alone only while it
measures (gpu_turns.Turn.exclusive): the exclusive part of a grading is its measurements,
not its compile and set-up, and gradings sharing a GPU wait on nothing else."""
import threading
import time

from grader.gpu import turns as gpu_turns


def _sharer_coming(folder) -> tuple[threading.Thread, threading.Event]:
    """A neighbour's test asking for a shared turn now: the event is set once it got in."""
    got_in = threading.Event()

    def sharer():
        with gpu_turns.turn("gpu-test", False, folder):
            got_in.set()
    t = threading.Thread(target=sharer)
    t.start()
    return t, got_in


def test_a_shared_turn_turns_exclusive_for_a_block_and_back(tmp_path):
    with gpu_turns.turn("gpu-test", False, tmp_path) as mine:
        # another sharer gets in beside it at once
        with gpu_turns.turn("gpu-test", False, tmp_path, share_s=30) as other:
            assert other.alone
        with mine.exclusive(wait_s=5) as alone:
            assert alone, "nobody else held the GPU, so the block had it alone"
            t, got_in = _sharer_coming(tmp_path)
            assert not got_in.wait(0.5), "a sharer came in while the GPU was held alone"
        assert got_in.wait(5), "the sharer waited on after the exclusive block ended"
        t.join(5)
        assert mine.exclusive_s >= 0.5
        # shared again: a neighbour's sharer gets in while this turn is still held
        with gpu_turns.turn("gpu-test", False, tmp_path) as again:
            assert again.alone


def test_the_exclusive_block_waits_for_sharers_inside_and_says_when_it_went_ahead(tmp_path):
    inside, leave = threading.Event(), threading.Event()

    def neighbour():
        with gpu_turns.turn("gpu-test", False, tmp_path, share_s=30):
            inside.set()
            leave.wait(10)
    t = threading.Thread(target=neighbour)
    t.start()
    assert inside.wait(5)
    with gpu_turns.turn("gpu-test", False, tmp_path) as mine:
        threading.Timer(0.4, leave.set).start()
        started = time.monotonic()
        with mine.exclusive(wait_s=5) as alone:
            waited = time.monotonic() - started
            assert alone and waited >= 0.3, f"went ahead after {waited:.2f} s beside a sharer"
    t.join(5)
    leave.clear()
    t = threading.Thread(target=neighbour)
    inside.clear()
    t.start()
    assert inside.wait(5)
    with gpu_turns.turn("gpu-test", False, tmp_path) as mine:
        with mine.exclusive(wait_s=0.3) as alone:
            assert not alone, "a sharer that stays inside past wait_s: the block goes ahead, not alone"
    leave.set()
    t.join(5)
    assert not mine.alone, "the test's turn remembers it was not alone"


def test_an_exclusive_block_held_past_its_hold_is_lost(tmp_path):
    with gpu_turns.turn("gpu-test", False, tmp_path) as mine:
        with mine.exclusive(wait_s=1, hold_s=0.3):
            time.sleep(0.6)
            with gpu_turns.turn("gpu-test", False, tmp_path) as neighbour:   # let in at the deadline
                assert neighbour.alone
    assert mine.lost


def test_the_wait_for_the_gpu_alone_is_counted_apart_from_the_time_holding_it(tmp_path):
    """A timing test's wait for its neighbours to leave is theirs, not its own cost: Turn.waited_s
    counts it (the report's gpu_turn_wait_s, which validate's budgets leave aside), and
    exclusive_s only the block itself."""
    left = threading.Event()

    def neighbour(inside: threading.Event):
        with gpu_turns.turn("gpu-test", False, tmp_path, share_s=30):
            inside.set()
            time.sleep(0.6)
        left.set()
    inside = threading.Event()
    t = threading.Thread(target=neighbour, args=(inside,))
    t.start()
    assert inside.wait(5)
    with gpu_turns.turn("gpu-test", False, tmp_path) as mine:
        with mine.exclusive(wait_s=5) as alone:
            assert alone and left.is_set(), "the block began only once the neighbour had left"
            time.sleep(0.2)
    t.join(5)
    assert 0.3 <= mine.waited_s < 2.0, mine.waited_s
    assert 0.2 <= mine.exclusive_s < 0.5, mine.exclusive_s


def test_timing_tests_waiting_for_the_gpu_go_before_sharers_that_came_meanwhile(tmp_path):
    """Two gradings' timing tests want the GPU alone while a neighbour's sharing test is inside,
    and a third grading's sharer arrives while they wait: once the neighbour leaves, both measure
    one after the other, and the sharer gets in only after them. Were the sharer let in between,
    the second timing test would wait for the sharer's whole test to end while the GPU stood idle."""
    order, lock = [], threading.Lock()
    inside, leave, t2_in, t2_go = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    def note(what):
        with lock:
            order.append(what)

    def neighbour():
        with gpu_turns.turn("gpu-test", False, tmp_path, share_s=30):
            inside.set()
            leave.wait(10)

    def timing(name, entered=None, go=None):
        with gpu_turns.turn("gpu-test", False, tmp_path, share_s=30) as mine:    # its test begins
            if entered is not None:
                entered.set()
                go.wait(10)
            with mine.exclusive(wait_s=10):
                note(f"{name} measures")
                time.sleep(0.3)
                note(f"{name} done")

    def sharer():
        with gpu_turns.turn("gpu-test", False, tmp_path):
            note("sharer in")

    threads = [threading.Thread(target=neighbour), threading.Thread(target=timing, args=("t2", t2_in, t2_go))]
    threads[0].start()
    assert inside.wait(5)
    threads[1].start()
    assert t2_in.wait(5)
    for target, args in ((timing, ("t1",)), (sharer, ())):
        threads.append(threading.Thread(target=target, args=args))
        threads[-1].start()
        time.sleep(0.3)
    t2_go.set()                 # t2 asks for the GPU alone after the sharer came
    time.sleep(0.3)
    leave.set()
    for t in threads:
        t.join(10)
    assert order.index("sharer in") > max(order.index("t1 done"), order.index("t2 done")), order


def test_a_sharer_leaves_the_gpu_at_its_next_checkpoint_to_a_waiting_timing_test(tmp_path):
    """A sharer holds the GPU for its GPU work, not its whole test: at the checkpoint before its
    next call (gpu_turns.checkpoint, run by the grading's workers) it steps out while a timing
    test waits, and comes back once that test is done. The timing test waits for the piece of
    work in flight, not for the rest of the neighbour's test."""
    first_piece, events = threading.Event(), {}

    def neighbour():
        with gpu_turns.turn("gpu-test", False, tmp_path, share_s=30):
            first_piece.set()
            time.sleep(0.4)                        # its first piece of GPU work
            events["waited"] = gpu_turns.checkpoint()     # a call into its worker begins
            events["back"] = time.monotonic()
            time.sleep(3)                          # the rest of its test
    t = threading.Thread(target=neighbour)
    t.start()
    assert first_piece.wait(5)
    asked = time.monotonic()
    with gpu_turns.turn("gpu-test", True, tmp_path, wait_s=10) as mine:
        waited = time.monotonic() - asked
        assert mine.alone
        time.sleep(0.3)                            # the timing
        done = time.monotonic()
    assert waited < 1.5, f"the timing test waited {waited:.2f} s: for the neighbour's whole test"
    t.join(10)
    assert events["back"] >= done, "the neighbour came back while the GPU was held alone"
    assert events["waited"] >= 0.25, "the neighbour's wait is what it reports"


def test_a_checkpoint_with_no_timing_test_waiting_goes_straight_on(tmp_path):
    with gpu_turns.turn("gpu-test", False, tmp_path) as mine:
        began = time.monotonic()
        assert gpu_turns.checkpoint() == 0.0
        assert time.monotonic() - began < 0.05 and mine.checkpoint_waited_s == 0.0
        with mine.exclusive(wait_s=1):
            assert gpu_turns.checkpoint() == 0.0, "a turn held alone has nobody to step aside for"
    assert gpu_turns.checkpoint() == 0.0, "outside any turn there is nothing to do"


def test_a_block_held_alone_inside_another_is_that_block(tmp_path):
    """The reference timed inside a performance test (its figures made late) asks for the GPU
    alone inside the test's own window: it must neither wait for itself nor let go between."""
    with gpu_turns.turn("gpu-test", False, tmp_path) as mine:
        assert gpu_turns.current() is mine
        with mine.exclusive(wait_s=5):
            began = time.monotonic()
            with mine.exclusive(wait_s=5) as inner:
                assert inner.alone and time.monotonic() - began < 0.5
                t, got_in = _sharer_coming(tmp_path)
                assert not got_in.wait(0.3), "a sharer came in inside the nested block"
            assert not got_in.wait(0.3), "the outer block let go of the GPU when the inner one ended"
        assert got_in.wait(5)
        t.join(5)
    assert gpu_turns.current() is None
