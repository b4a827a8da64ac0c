"""Tensors the worker can see: shared memory, so a call's writes land in ours.

CPU: every storage that crosses is a file-backed MAP_SHARED mapping in a private
folder; untouched pages cost nothing, so a 6.5 GB cache stays sparse. CUDA: each
storage is an allocation of its own (vmm.py), handed to the worker as a file
descriptor, so what the worker maps holds nothing but the tensors it was given
(never the grader's expected results) and works across uids. Without the CUDA
driver bindings, storages go by torch's CUDA IPC from a memory pool of their own,
which only a worker of the grader's own uid can open. Tensors allocated elsewhere are staged: copied in before the call and
copied back after it, so views keep their strides, offsets and aliasing.

A test's small tensors are staged at nearly every call, and a fresh allocation for each (made,
exported, mapped by the worker, unmapped and freed on both sides) cost more than the call. So
staging buffers are kept, by size class, for the life of the Exchange (STAGING_KEPT_BYTES in
all), and the worker keeps its mapping of each (worker.Mapper's `kept`): what it can reach there
is what it was given before, its own inputs and outputs, never the grader's expected results.
"""
from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

import torch

from . import vmm as vmm_module
from . import wire

STAGING_KEPT_BYTES = 64 << 20      # staging buffers kept for reuse, in all; past it they are freed after each call
STAGING_MIN_BYTES = 64 << 10       # the smallest size class


def staging_class(nbytes: int) -> int:
    """The size of the buffer that stages `nbytes`: the next power of two, at least STAGING_MIN_BYTES."""
    return max(STAGING_MIN_BYTES, 1 << (max(1, nbytes) - 1).bit_length())


def _bytes_view(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class Exchange:
    def __init__(self, folder: Path, device: torch.device, chown=lambda path: None, vmm: bool = False):
        self.folder = folder
        self.device = device
        self.chown = chown
        self.vmm = vmm and device.type == "cuda"
        self._allocations: dict[int, "vmm_module.Allocation"] = {}   # CUDA with vmm: by data_ptr
        self._outgoing: dict[int, int] = {}                            # piece id -> fd, next message
        self._names = itertools.count()
        # Registered storages by data_ptr. Each entry keeps its tensor alive, so an address
        # cannot be reused by an unrelated tensor while it is registered here.
        self._files: dict[int, tuple[str, int, torch.Tensor]] = {}   # CPU: path, nbytes, base
        self._pooled: dict[int, torch.Tensor] = {}                   # CUDA: base from our pool
        self._pool = torch.cuda.MemPool() if device.type == "cuda" and not self.vmm else None
        # Staging buffers kept between calls (not with torch's CUDA IPC, whose worker maps per call):
        # the free ones by size class, and the data_ptr of every kept one.
        self._spare: dict[int, list[torch.Tensor]] = {}
        self._kept: set[int] = set()
        self._kept_bytes = 0
        self._keeps = device.type == "cpu" or self.vmm

    # -- allocation -------------------------------------------------------
    def empty(self, shape, dtype, backed: list[tuple[int, int]] | None = None) -> torch.Tensor:
        """A tensor the worker maps without a copy. `backed` ((start, stop) byte ranges) says
        which bytes the test will ever touch: on the GPU only those get memory, and any other
        address of the tensor faults when touched (see vmm.Allocation); on the CPU the file
        is sparse whatever is said, and without the driver bindings all of it is allocated."""
        nbytes = max(1, torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size())
        base = self._alloc_bytes(nbytes, backed)
        return torch.empty(0, dtype=dtype, device=base.device).set_(base.untyped_storage(), 0, shape)

    def zeros(self, shape, dtype, backed: list[tuple[int, int]] | None = None) -> torch.Tensor:
        t = self.empty(shape, dtype, backed)
        if self.device.type == "cuda":
            # only what has memory behind it (fresh CPU files are zero already, and stay sparse)
            alloc = self._allocations.get(t.untyped_storage().data_ptr())
            flat = _bytes_view(t.untyped_storage())
            for offset, length in (alloc.pieces if alloc is not None else [(0, flat.numel())]):
                flat[offset: offset + length].zero_()
        return t

    def _alloc_bytes(self, nbytes: int, backed: list[tuple[int, int]] | None = None) -> torch.Tensor:
        if self.vmm:
            alloc = vmm_module.Allocation(nbytes, torch.cuda.current_device(), backed)
            self._allocations[alloc.tensor.data_ptr()] = alloc
            return alloc.tensor
        if self.device.type == "cuda":
            with torch.cuda.use_mem_pool(self._pool):
                base = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            self._pooled[base.untyped_storage().data_ptr()] = base
            return base
        path = self.folder / f"t{next(self._names)}"
        path.touch(mode=0o600)
        self.chown(path)
        base = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
        self._files[base.untyped_storage().data_ptr()] = (str(path), nbytes, base)
        return base

    def release(self, staging: bool = False) -> None:
        """Forget everything allocated so far (called between tests), the kept staging buffers
        too where `staging` (the worker that mapped them is gone or going)."""
        kept = set() if staging else self._kept
        for key in [k for k in self._files if k not in kept]:
            with contextlib.suppress(OSError):
                os.unlink(self._files.pop(key)[0])
        self._pooled.clear()
        gone = [k for k in self._allocations if k not in kept]
        if gone:
            torch.cuda.synchronize()
            for key in gone:
                self._allocations.pop(key).close()
        if staging:
            self._spare.clear()
            self._kept.clear()
            self._kept_bytes = 0
        self._outgoing.clear()

    def take_outgoing(self) -> tuple[list[int], list[int]]:
        """(piece ids, their fds) that the message being sent refers to."""
        ids = list(self._outgoing)
        fds = [self._outgoing[i] for i in ids]
        self._outgoing.clear()
        return ids, fds

    # -- crossing -----------------------------------------------------------
    @contextlib.contextmanager
    def crossing(self, args, kwargs):
        """Yield the wire form of (args, kwargs); copy staged storages back on exit."""
        staged: dict[int, tuple[torch.UntypedStorage, torch.Tensor]] = {}

        def describe(t: torch.Tensor) -> dict:
            if t.device.type != self.device.type:
                raise TypeError(f"tensor on {t.device} but the grader runs on {self.device}")
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if not self._is_exchange(key):
                if key not in staged:
                    copy = self._stage(storage.nbytes())
                    if storage.nbytes():
                        copy[: storage.nbytes()].copy_(_bytes_view(storage))
                    staged[key] = (storage, copy)
                copy = staged[key][1]
                t = torch.empty(0, dtype=t.dtype, device=t.device).set_(
                    copy.untyped_storage(), t.storage_offset(), t.shape, t.stride())
            return self._descriptor(t)

        try:
            yield (wire.encode(list(args), describe, torch.Tensor),
                   wire.encode(list(kwargs.items()), describe, torch.Tensor))
        finally:
            for storage, copy in staged.values():
                if storage.nbytes():
                    _bytes_view(storage).copy_(copy[: storage.nbytes()])
                self._unstage(copy)

    def _stage(self, nbytes: int) -> torch.Tensor:
        """A buffer for a staged storage of `nbytes`: a kept one of its size class (a free one, else
        a new one while the kept ones leave room), else one of `nbytes` (at least one byte).
        Everything past `nbytes` is zeroed, whatever an earlier call, the worker or the allocator
        left there: the staged copy overwrites only its own bytes."""
        size = staging_class(nbytes)
        spare = self._spare.get(size)
        if spare:
            base = spare.pop()
        elif self._keeps and self._kept_bytes + size <= STAGING_KEPT_BYTES:
            base = self._alloc_bytes(size)
            self._kept.add(base.untyped_storage().data_ptr())
            self._kept_bytes += size
        else:
            base = self._alloc_bytes(max(1, nbytes))
        base[nbytes:].zero_()
        return base

    def _unstage(self, base: torch.Tensor) -> None:
        if base.untyped_storage().data_ptr() in self._kept:
            self._spare.setdefault(base.numel(), []).append(base)
        else:
            self._forget(base)

    def _is_exchange(self, key: int) -> bool:
        return key in self._files or key in self._pooled or key in self._allocations

    def _forget(self, base: torch.Tensor) -> None:
        key = base.untyped_storage().data_ptr()
        self._pooled.pop(key, None)
        alloc = self._allocations.pop(key, None)
        if alloc is not None:
            torch.cuda.synchronize()
            for pid in alloc.piece_ids:
                self._outgoing.pop(pid, None)
            alloc.close()
        entry = self._files.pop(key, None)
        if entry:
            with contextlib.suppress(OSError):
                os.unlink(entry[0])

    def _descriptor(self, t: torch.Tensor) -> dict:
        common = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                  "stride": list(t.stride()), "offset": t.storage_offset()}
        if t.untyped_storage().data_ptr() in self._kept:
            common["kept"] = True             # the worker keeps it mapped for the next calls
        if t.device.type == "cpu":
            path, nbytes, _ = self._files[t.untyped_storage().data_ptr()]
            return dict(common, kind="file", path=path, nbytes=nbytes)
        if self.vmm:
            alloc = self._allocations[t.untyped_storage().data_ptr()]
            self._outgoing.update(zip(alloc.piece_ids, alloc.fds))
            return dict(common, kind="vmm", **alloc.describe())
        from torch.multiprocessing.reductions import reduce_tensor
        _, a = reduce_tensor(t)
        return dict(common, kind="cuda", device=a[6], handle=wire.b64(a[7]),
                    storage_nbytes=a[8], storage_offset_bytes=a[9],
                    ref_counter_handle=wire.b64(a[11]), ref_counter_offset=a[12],
                    event_handle=wire.b64(a[13]) if a[13] is not None else None,
                    event_sync_required=a[14])


def tensor_from_wire(d: dict, blobs: list[bytes], device: torch.device) -> torch.Tensor:
    """Rebuild a result as a plain tensor, trusting nothing the worker said."""
    if not isinstance(d, dict) or set(d) != {"dtype", "shape", "blob"}:
        raise wire.WireError("malformed tensor result")
    if d["dtype"] not in wire.DTYPES:
        raise wire.WireError(f"dtype {d['dtype']!r} is not accepted")
    shape = d["shape"]
    if not (isinstance(shape, list) and len(shape) <= 8 and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise wire.WireError("malformed shape")
    if not (isinstance(d["blob"], int) and 0 <= d["blob"] < len(blobs)):
        raise wire.WireError("malformed blob index")
    dtype = getattr(torch, d["dtype"])
    data = blobs[d["blob"]]
    numel = torch.Size(shape).numel()
    if len(data) != numel * torch.empty(0, dtype=dtype).element_size():
        raise wire.WireError("tensor bytes do not match its shape")
    if numel == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype)
    return flat.reshape(shape).to(device)
