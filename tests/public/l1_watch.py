"""What one call of your code did, seen from inside this process: the Triton kernels it launched,
the PyTorch operations that wrote its tensor arguments outside those launches, and, for
slot_mapping, how much work it did. The grader gathers the same evidence in its own process, in
the same way; the public tests use this copy so that you can check those rules on your machine.

Launches are counted with Triton's launch hooks on a GPU, and by wrapping the interpreter's grid
executor under TRITON_INTERPRET=1, where the hooks never fire. PyTorch's writes are seen through a
TorchDispatchMode, at the level of aten operators. Custom operators (torch.library.custom_op,
triton_op) are looked into, not taken at their word: what their body does is what counts. The
copies Triton's autotuner makes to restore arguments between the configs it times count as part
of launching.
"""
from __future__ import annotations

import contextlib
import os
import sys

import torch


class WorkCapped(BaseException):
    """A count passed its limit: the call is cut short, since more of the same work could only
    confirm it. A BaseException, so that `except Exception` in the code under test does not
    swallow it."""


class WorkCount:
    """How much work one call does, counted rather than timed (a laptop's clock says little):

    - ops: PyTorch operators run (what a TorchDispatchMode sees);
    - lines: Python lines run in the submission's own file;
    - items: tensor elements turned into Python numbers by Tensor.tolist;
    - max_alloc_bytes: the largest tensor an operator returned that is none of the arguments;
    - python_objects: the most Python objects alive at once beyond those at the call's start.

    Work inside a Triton launch is not counted: under the interpreter a kernel's body is Python,
    and a launch is one step of the call however many programs it has."""

    NAMES = ("ops", "lines", "items", "max_alloc_bytes", "python_objects")
    PEAKS = ("max_alloc_bytes", "python_objects")

    def __init__(self, caps: dict, source: str, arguments, in_launch):
        self.caps = dict(caps)
        self.source = source
        self.arguments = arguments                 # storage address -> argument
        self.in_launch = in_launch
        self.counts = dict.fromkeys(self.NAMES, 0)
        self.capped: str | None = None
        self.intact = True
        self.tracer_raised = False
        self._blocks = sys.getallocatedblocks()

    def _add(self, name: str, n: int) -> None:
        if name in self.PEAKS:
            self.counts[name] = max(self.counts[name], n)
        else:
            self.counts[name] += n
            self._add("python_objects", sys.getallocatedblocks() - self._blocks)
        cap = self.caps.get(name)
        if cap is not None and self.counts[name] > cap:
            self.capped = self.capped or name
            raise WorkCapped(f"{name} passed {cap}")

    def op(self) -> None:
        if not self.in_launch():
            self._add("ops", 1)

    def allocated(self, out) -> None:
        from torch.utils._pytree import tree_leaves
        if self.in_launch():
            return
        for t in tree_leaves(out):
            if not (isinstance(t, torch.Tensor) and t.layout == torch.strided):
                continue
            try:
                storage = t.untyped_storage()
                ptr, nbytes = storage.data_ptr(), storage.nbytes()
            except (RuntimeError, NotImplementedError):
                continue
            if ptr not in self.arguments:
                self._add("max_alloc_bytes", nbytes)

    def _tracer(self):
        source, count = self.source, self

        def local(frame, event, arg):
            try:
                if event == "line" and not count.in_launch():
                    count._add("lines", 1)
                elif event == "return" and not count.in_launch():
                    count._add("python_objects", sys.getallocatedblocks() - count._blocks)
            except WorkCapped:
                count.tracer_raised = True         # Python unsets a trace function that raises
                raise
            return local

        def tracer(frame, event, arg):
            return local if frame.f_code.co_filename == source else None
        return tracer

    @contextlib.contextmanager
    def watching(self, mode):
        tolist, count = torch.Tensor.tolist, self

        def counted_tolist(t, *a, **k):
            if not count.in_launch():
                count._add("items", t.numel())
            return tolist(t, *a, **k)
        tracer = self._tracer()
        previous = sys.gettrace()
        torch.Tensor.tolist = counted_tolist
        sys.settrace(tracer)
        try:
            yield
        finally:
            from torch.utils._python_dispatch import _get_current_dispatch_mode
            self.intact = (torch.Tensor.tolist is counted_tolist and _get_current_dispatch_mode() is mode
                           and (sys.gettrace() is tracer or self.tracer_raised))
            sys.settrace(previous)
            torch.Tensor.tolist = tolist


class Watch:
    """One call, watched: `launches` (None where this Triton offers no way to count them),
    `writes` ([(argument name, operator)] of PyTorch writes outside every launch) and, where
    asked, `work` (a WorkCount). With `hold`, those writes are recorded and not done, so that what
    the arguments hold afterwards is what the kernels wrote."""

    OWN_NAMESPACES = ("aten", "prims")              # operators with no Python body to look into

    def __init__(self, arguments: dict, hold: bool = False, count: dict | None = None,
                 source: str | None = None):
        self.hold = hold
        self.launches: int | None = 0
        self.depth = 0
        self.writes: list[tuple[str, str]] = []
        self.storages: dict[int, list[str]] = {}
        self.inside: list[str] = []
        for name, t in arguments.items():
            if isinstance(t, torch.Tensor):
                self.storages.setdefault(t.untyped_storage().data_ptr(), []).append(name)
        self.work = (WorkCount(count, source, self.storages, lambda: self.depth > 0)
                     if count is not None else None)

    def enter(self, *_):
        self.launches += 1
        self.depth += 1

    def exit(self, *_):
        self.depth -= 1

    def written(self, func, args, kwargs) -> list[str]:
        schema = getattr(func, "_schema", None)        # a higher-order operator has none
        if self.depth or schema is None:
            return []
        hit = []
        for i, a in enumerate(schema.arguments):
            if a.alias_info is None or not a.alias_info.is_write:
                continue
            t = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
            if isinstance(t, torch.Tensor):
                hit += self.storages.get(t.untyped_storage().data_ptr(), ())
        return hit

    def record(self, hit: list[str], op: str) -> None:
        if self.inside:
            op = f"{op} inside {self.inside[-1]}"
        for name in hit:
            if (name, op) not in self.writes:
                self.writes.append((name, op))

    def extension(self, func) -> bool:
        return isinstance(func, torch._ops.OpOverload) and func.namespace not in self.OWN_NAMESPACES

    def run_inside(self, func, hit: list[str], args, kwargs, mode):
        """Run a custom operator's own body with the mode back on, so that what it does is what
        is judged; it counts as the writer itself only where nothing inside it was seen."""
        from torch.utils._pytree import tree_leaves
        keys = None
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                keys = torch._C._dispatch_keys(t) if keys is None else keys | torch._C._dispatch_keys(t)
        keys = keys & torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)
        launches, writes = self.launches, len(self.writes)
        self.inside.append(str(func))
        try:
            with mode():
                return func.redispatch(keys, *args, **kwargs)
        finally:
            self.inside.pop()
            if self.launches == launches and len(self.writes) == writes:
                self.record(hit, str(func))

    @staticmethod
    def held(func, args, kwargs) -> tuple | None:
        """(what the operator returns) for a write left undone, or None where that cannot be
        made up without running it."""
        schema = func._schema
        params = list(schema.arguments)

        def argument(i, a):
            return kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
        out = []
        for r in schema.returns:
            if r.alias_info is None or not r.alias_info.is_write:
                return None
            same = [argument(i, a) for i, a in enumerate(params)
                    if a.alias_info is not None and set(a.alias_info.before_set) == set(r.alias_info.before_set)]
            if not same:
                return None
            out.append(same[0])
        return (None if not out else out[0] if len(out) == 1 else tuple(out),)

    @staticmethod
    def autotuner_hook() -> bool:
        """Whether the operation in flight was called by Triton's autotuner itself (restore_value,
        reset_to_zero), which is part of launching, not a write of yours."""
        autotuner = sys.modules.get("triton.runtime.autotuner")
        if autotuner is None:
            return False
        skip = (os.path.dirname(torch.__file__), os.path.abspath(__file__))
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(skip):
            frame = frame.f_back
        return (frame is not None and frame.f_code.co_filename == getattr(autotuner, "__file__", None)
                and frame.f_code.co_name in ("_pre_hook", "_post_hook"))

    @contextlib.contextmanager
    def watching(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        watch = self

        class Writes(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls):
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if watch.work is not None:
                    watch.work.op()
                hit = watch.written(func, args, kwargs)
                if hit and watch.extension(func):
                    return watch.run_inside(func, hit, args, kwargs, Writes)
                if hit and not watch.autotuner_hook():
                    watch.record(hit, str(func))
                    held = watch.held(func, args, kwargs) if watch.hold else None
                    if held is not None:
                        return held[0]
                out = func(*args, **kwargs)
                if watch.work is not None:
                    watch.work.allocated(out)
                return out

        with contextlib.ExitStack() as stack:
            if not self._hook_launches(stack):
                self.launches = None
            mode = stack.enter_context(Writes())
            if self.work is not None:
                stack.enter_context(self.work.watching(mode))
            yield self

    def _hook_launches(self, stack: contextlib.ExitStack) -> bool:
        """Install the launch counters for the length of the call; False where this Triton offers
        no hook."""
        import triton
        if os.environ.get("TRITON_INTERPRET") == "1":
            try:
                from triton.runtime.interpreter import GridExecutor
            except ImportError:
                return False
            run, watch = GridExecutor.__call__, self

            def counted(executor, *a, **k):
                watch.enter()
                try:
                    return run(executor, *a, **k)
                finally:
                    watch.exit()
            GridExecutor.__call__ = counted
            stack.callback(setattr, GridExecutor, "__call__", run)
            return True
        runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
        if runtime is None:                           # before triton 3.4: hooks on CompiledKernel
            try:
                from triton.compiler import CompiledKernel as runtime
            except ImportError:
                return False
            if not hasattr(runtime, "launch_enter_hook"):
                return False
        for name, hook in (("launch_enter_hook", self.enter), ("launch_exit_hook", self.exit)):
            chain = getattr(runtime, name, None)
            if hasattr(chain, "add"):                 # a HookChain (triton >= 3.5)
                chain.add(hook)
                stack.callback(chain.remove, hook)
            else:                                     # a single callable or None
                def both(*a, _old=chain, _new=hook):
                    if _old is not None:
                        _old(*a)
                    _new(*a)
                setattr(runtime, name, both)
                stack.callback(setattr, runtime, name, chain)
        return True


def watched(fn, arguments: dict, *, hold: bool = False, count: dict | None = None, source: str | None = None):
    """fn(**arguments) under a Watch: (the Watch, what fn returned or None, the exception or None).
    A call cut short by its count returns the WorkCapped exception."""
    watch = Watch(arguments, hold=hold, count=count, source=source)
    result = error = None
    try:
        with watch.watching():
            result = fn(*arguments.values())
            if torch.cuda.is_available():
                torch.cuda.synchronize()
    except (Exception, WorkCapped) as exc:
        error = exc
    return watch, result, error
