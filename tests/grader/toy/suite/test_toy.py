"""Hidden suite of the toy assignment. Special values of y trigger the bad submissions' misbehaviour,
so one test can crash or hang while its neighbours must still pass."""
import os

import pytest
import torch

from grader.sandbox import SubmissionError


@pytest.mark.area("add")
@pytest.mark.parametrize("trigger", [0.0, 7.0, 13.0])
def test_add_into(submission, device, rng, trigger):
    """x + y lands in x"""
    x = torch.randn(64, generator=rng).to(device)
    y = torch.full((64,), trigger, device=device)
    expected = x + y
    submission.add_into(x, y)
    assert torch.equal(x, expected), "x must hold x + y after the call"


@pytest.mark.area("add")
def test_add_into_strided_view(submission, device):
    """Views keep their strides and aliasing"""
    base = torch.zeros(4, 8, device=device)
    view = base[:, ::2]
    submission.add_into(view, torch.ones(4, 4, device=device))
    assert base[:, ::2].eq(1).all() and base[:, 1::2].eq(0).all(), "only the view's elements may change"


@pytest.mark.area("add")
def test_add_into_rejects_shape_mismatch(submission, device, record_property):
    """Mismatched shapes are rejected with ValueError"""
    with pytest.raises(SubmissionError) as exc:
        submission.add_into(torch.zeros(3, device=device), torch.zeros(4, device=device))
    # for the instructor's eyes only (extra_data.instructor.details), as the real suites record theirs
    record_property("detail", f"shapes (3,) and (4,): raised {exc.value.type_name}")
    assert exc.value.type_name == "ValueError", "mismatched shapes must raise ValueError"


@pytest.mark.area("echo")
@pytest.mark.parametrize("value", [3, "text", None, (1, 2.5)])
def test_echo_plain(submission, value):
    """Plain values come back unchanged"""
    assert submission.echo(value) == value, "echo must return its argument"


# Where the engine's tests ask (tests/grader/toy_reports.py), the fixture below notes each time it
# runs, so that they can see whether a test built its inputs after the import had failed.
BUILT_INPUTS_LOG = "TOY_BUILT_INPUTS_LOG"


@pytest.fixture
def costly_inputs(device, request):
    """Stands for inputs that take time to build (a real suite's 13 GB caches)."""
    if os.environ.get(BUILT_INPUTS_LOG):
        with open(os.environ[BUILT_INPUTS_LOG], "a") as log:
            log.write(request.node.name + "\n")
    return torch.arange(6, dtype=torch.int64, device=device).reshape(2, 3)


@pytest.mark.area("echo")
def test_echo_tensor(submission, costly_inputs):
    """Tensors come back as plain tensors with the same values"""
    t = costly_inputs
    back = submission.echo(t)
    assert type(back) is torch.Tensor and torch.equal(back, t), "echo must return the same tensor values"


@pytest.mark.area("gpu_only")
def test_gpu_only(submission):
    """Skipped where there is no GPU"""

