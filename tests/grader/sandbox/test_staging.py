"""A test's own tensors are staged through buffers the grader keeps from call to call
(grader/sandbox/exchange.py): what a worker finds in them is only what it was given, and each
call's outputs still come back to the tensors the test passed."""
from pathlib import Path

import pytest
import torch

from grader.sandbox import Confinement, Submission
from grader.sandbox.exchange import STAGING_KEPT_BYTES, STAGING_MIN_BYTES, Exchange, staging_class

TOY = Path(__file__).parent.parent / "toy" / "submissions"


@pytest.fixture
def sub():
    conf = Confinement.prepare("cpu", [], want_uid=False)
    sub = Submission(TOY / "reads_its_buffers.py", ["storage_bytes", "fill", "fill_past"], torch.device("cpu"), conf, timeout=60)
    yield sub
    sub.close()
    conf.release()


def test_outputs_come_back_to_each_calls_own_tensors_while_buffers_are_reused(sub):
    tensors = [torch.zeros(n) for n in (1000, 10, 1000, 5000)]
    for i, t in enumerate(tensors):
        sub.fill(t, float(i + 1))
    for i, t in enumerate(tensors):
        assert torch.equal(t, torch.full_like(t, float(i + 1))), f"call {i}'s output did not come back"
    assert len(sub.exchange._kept) == 1, "the four calls, one at a time, were staged through one kept buffer"


def test_a_buffer_reused_for_a_smaller_tensor_shows_nothing_past_it(sub):
    """A worker that reads the whole storage behind a small tensor must not find an earlier call's
    larger tensor there: the bytes past the small one are zero."""
    sub.fill(torch.zeros(4000), 7.0)
    small = torch.full((10,), 3.0)
    seen = sub.storage_bytes(small)
    assert len(seen) == staging_class(small.numel() * 4)
    assert torch.equal(seen[:40].view(torch.float32), small)
    assert not seen[40:].any(), "the bytes past the small tensor still held the earlier call's values"


def test_what_a_worker_wrote_past_its_tensor_is_gone_at_the_next_call(sub):
    """The kept buffer is no store across calls (or across a restarted worker): the bytes past a
    tensor are zeroed at each reuse, whoever wrote them."""
    first = torch.zeros(10)
    sub.fill_past(first, 9)
    assert torch.equal(first.view(torch.uint8), torch.full((40,), 9, dtype=torch.uint8))
    seen = sub.storage_bytes(torch.zeros(10))
    assert not seen.any(), "bytes the worker wrote past its tensor in an earlier call were still there"


def test_kept_buffers_stay_under_their_cap_and_go_with_the_exchange(tmp_path):
    x = Exchange(tmp_path, torch.device("cpu"))
    sizes = [STAGING_MIN_BYTES, 3 * STAGING_MIN_BYTES, STAGING_KEPT_BYTES // 2, STAGING_KEPT_BYTES // 2]
    with x.crossing([torch.zeros(n, dtype=torch.uint8) for n in sizes], {}):
        pass
    assert x._kept_bytes <= STAGING_KEPT_BYTES
    assert len(x._kept) == 3, "the last half of the cap did not fit beside the others and was not kept"
    assert len(list(tmp_path.iterdir())) == 3, "the buffer that was not kept was freed after the call"
    x.release()
    assert len(list(tmp_path.iterdir())) == 3, "release between tests keeps the staging buffers"
    x.release(staging=True)
    assert not list(tmp_path.iterdir()) and not x._kept


def test_a_new_kept_buffer_shows_nothing_past_the_tensor_whatever_its_memory_held(tmp_path, monkeypatch):
    """A new kept buffer is larger than its first tensor, and nothing promises fresh device memory
    is zero (a CUDA allocation may come back with what this process freed): its tail is zeroed
    as a reused buffer's is, not trusted to be clean."""
    x = Exchange(tmp_path, torch.device("cpu"))
    alloc = x._alloc_bytes
    monkeypatch.setattr(x, "_alloc_bytes", lambda n, backed=None: alloc(n, backed).fill_(0xAB))
    with x.crossing([torch.zeros(10)], {}):
        (base,) = [torch.from_file(str(p), size=STAGING_MIN_BYTES, dtype=torch.uint8) for p in tmp_path.iterdir()]
        assert not base[40:].any(), "the bytes past the tensor held what the new buffer's memory held"
