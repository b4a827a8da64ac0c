"""The worker's Observer (grader/sandbox/worker.py), run in this process on the CPU interpreter:
which writes of a call's tensor arguments it puts down to PyTorch, and what `hold` leaves undone.
A kernel reached through PyTorch's extension points is still a kernel; an aten write is a
PyTorch write wherever it is made."""
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from grader.assignment import REPO

sys.path.insert(0, str(REPO / "grader" / "sandbox"))
import worker  # noqa: E402

worker.torch = torch


def _make_ops():
    """Kernels and operators made under TRITON_INTERPRET=1, where triton.jit gives interpreted
    functions; once per session, as torch.library names are global."""
    pytest.importorskip("triton")
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(src, dst, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(dst + offs, tl.load(src + offs))

    @triton.jit
    def touch(src):
        tl.load(src)

    @torch.library.triton_op("observer_test::triton_copy", mutates_args={"dst"})
    def triton_copy(src: torch.Tensor, dst: torch.Tensor) -> None:
        torch.library.wrap_triton(copy_kernel)[(1,)](src, dst, N=src.numel())

    @torch.library.triton_op("observer_test::touch_beside_copy", mutates_args={"dst"})
    def touch_beside_copy(src: torch.Tensor, dst: torch.Tensor) -> None:
        torch.library.wrap_triton(touch)[(1,)](src)
        dst.copy_(src)

    @torch.library.custom_op("observer_test::custom_launch", mutates_args=("dst",))
    def custom_launch(src: torch.Tensor, dst: torch.Tensor) -> None:
        copy_kernel[(1,)](src, dst, N=src.numel())

    @torch.library.custom_op("observer_test::custom_aten", mutates_args=("dst",))
    def custom_aten(src: torch.Tensor, dst: torch.Tensor) -> None:
        dst.copy_(src)

    @torch.library.custom_op("observer_test::custom_unseen", mutates_args=("dst",))
    def custom_unseen(src: torch.Tensor, dst: torch.Tensor) -> None:
        # as a kernel of its own in C++ would: nothing inside reaches the dispatch mode
        with torch._C._DisableTorchDispatch():
            dst.copy_(src)

    def wall(fn, quantiles=None):
        t0 = time.perf_counter()
        fn()
        t = time.perf_counter() - t0
        return [t, t, t] if quantiles else t

    # do_bench of our own: the interpreter has no driver to time configs with
    restoring = triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2)], key=["N"],
                                restore_value=["dst"], do_bench=wall)(copy_kernel)
    zeroing = triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2)], key=["N"],
                              reset_to_zero=["dst"], do_bench=wall)(copy_kernel)
    user_hook = triton.autotune(configs=[triton.Config({}, pre_hook=lambda a: a["dst"].fill_(7.0))],
                                key=["N"])(copy_kernel)
    return SimpleNamespace(**locals())


@pytest.fixture(scope="module")
def ops():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        yield _make_ops()


def observe(fn, src, dst, hold=False):
    observer = worker.Observer([src, dst], {}, hold=hold)
    with observer.watching() as hooked:
        fn(src, dst)
    assert hooked
    return observer.report(hooked)


def tensors():
    return torch.arange(8, dtype=torch.float32) + 1, torch.zeros(8)


@pytest.mark.slow
def test_a_kernel_in_a_triton_op_or_custom_op_is_not_a_pytorch_write(ops):
    for op in (ops.triton_copy, ops.custom_launch):
        src, dst = tensors()
        assert observe(op, src, dst) == {"triton_launches": 1, "torch_writes": []}
        assert torch.equal(dst, src)


def test_an_aten_write_inside_a_custom_op_is_a_pytorch_write_named_with_its_op(ops):
    src, dst = tensors()
    assert observe(ops.custom_aten, src, dst)["torch_writes"] == [
        [1, "aten.copy_.default inside observer_test.custom_aten.default"]]
    # a kernel launched beside it in the same body does not make it one
    src, dst = tensors()
    seen = observe(ops.touch_beside_copy, src, dst)
    assert seen["triton_launches"] == 1
    assert seen["torch_writes"] == [[1, "aten.copy_.default inside observer_test.touch_beside_copy.default"]]


def test_a_custom_op_with_nothing_seen_inside_is_its_own_writer(ops):
    src, dst = tensors()
    assert observe(ops.custom_unseen, src, dst)["torch_writes"] == [[1, "observer_test.custom_unseen.default"]]


def test_autotune_restore_and_reset_copies_are_part_of_launching(ops):
    for kernel in (ops.restoring, ops.zeroing):
        src, dst = tensors()
        seen = observe(lambda s, d, k=kernel: k[(1,)](s, d, N=8), src, dst)
        assert seen["triton_launches"] == 3 and seen["torch_writes"] == []       # two timed, one real
        assert torch.equal(dst, src)


def test_on_caches_with_memory_behind_a_few_windows_autotune_takes_its_first_config_untimed_and_forgets_it(ops):
    """int64_overflow's 13 GB caches on the GPU have memory behind a few windows only: timing
    configs with restore_value would clone every byte of them (an illegal memory access), so the
    worker's configs_untimed runs the first config alone there, and the choice is not kept for
    the calls after (performance times the configs on caches backed whole)."""
    import triton
    from triton.runtime.autotuner import Autotuner
    tuner = triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2)], key=["N"],
                            restore_value=["dst"], do_bench=ops.wall)(ops.copy_kernel)
    run, bench = Autotuner.run, Autotuner._bench
    src, dst = tensors()
    with worker.configs_untimed(True):
        seen = observe(lambda s, d: tuner[(1,)](s, d, N=8), src, dst)
    assert seen == {"triton_launches": 1, "torch_writes": []}, "one launch: no config timed, nothing cloned"
    assert torch.equal(dst, src)
    assert tuner.cache == {}, "the untimed choice is forgotten after the call"
    assert (Autotuner.run, Autotuner._bench) == (run, bench)
    src, dst = tensors()
    assert observe(lambda s, d: tuner[(1,)](s, d, N=8), src, dst)["triton_launches"] == 3   # timed again
    src, dst = tensors()
    with worker.configs_untimed(False):        # caches backed whole: the file's own autotuning
        assert observe(lambda s, d: tuner[(1,)](s, d, N=8), src, dst)["triton_launches"] == 1   # chosen above
    assert len(tuner.cache) == 1


def test_a_users_own_autotune_hook_that_writes_is_a_pytorch_write(ops):
    src, dst = tensors()
    seen = observe(lambda s, d: ops.user_hook[(1,)](s, d, N=8), src, dst)
    assert seen["torch_writes"] == [[1, "aten.fill_.Scalar"]]


def test_hold_leaves_aten_writes_undone_and_kernels_writes_done(ops):
    src, dst = tensors()
    seen = observe(lambda s, d: d.copy_(s).add_(1), src, dst, hold=True)
    assert [op for _, op in seen["torch_writes"]] == ["aten.copy_.default", "aten.add_.Tensor"]
    assert not dst.any()                                    # held, and the chain still ran on `dst`
    src, dst = tensors()
    observe(ops.touch_beside_copy, src, dst, hold=True)
    assert not dst.any()
    src, dst = tensors()
    observe(ops.triton_copy, src, dst, hold=True)
    assert torch.equal(dst, src)
    src, dst = tensors()
    observe(lambda s, d: d.copy_(s), src, dst)              # without hold the write is done
    assert torch.equal(dst, src)
