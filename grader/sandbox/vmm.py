"""GPU memory a worker of another uid can map: CUDA virtual memory management.

torch shares CUDA tensors by legacy CUDA IPC, and the driver refuses to open such a
handle in a process of another user (measured on the H200 runner: "mapping of
buffer object failed"), so the worker would have to run as root beside the grader.
Memory made by cuMemCreate can instead be exported as a POSIX file descriptor and
handed over a Unix socket (SCM_RIGHTS): holding the descriptor is the permission,
whoever the receiver is. The grader makes an `Allocation`; the worker maps it as an
`Import` for the length of one request (a staging buffer, until the worker ends:
exchange.py), and the grader frees it when a test is done.
This file is copied into the sandbox beside worker.py, so it imports nothing from
the grader.
"""
from __future__ import annotations

import itertools
import os

_ids = itertools.count(1)


def available() -> bool:
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        return False
    return True


def _fd_type():
    from cuda.bindings import driver as cu
    return cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def _ok(result):
    err, *rest = result
    from cuda.bindings import driver as cu
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


class _Window:
    """__cuda_array_interface__ over raw device bytes, so torch can wrap them."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


def _access(device_index: int):
    from cuda.bindings import driver as cu
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = device_index
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    return access


class _Mapped:
    """A range of virtual addresses of `size` bytes, with physical memory mapped read-write
    at some of its pieces ((offset, length) each, in `pieces`); `tensor` is uint8 over the
    whole range. Bytes outside the pieces have no memory behind them: touching them is an
    illegal memory access, as any address outside an allocation is."""

    _ptr = None
    tensor = None

    def _reserve(self, nbytes: int, size: int) -> None:
        from cuda.bindings import driver as cu
        self.size, self.handles, self.pieces = size, [], []
        self._ptr = _ok(cu.cuMemAddressReserve(size, 0, 0, 0))

    def _map_piece(self, handle, offset: int, length: int, device_index: int) -> None:
        from cuda.bindings import driver as cu
        self.handles.append(handle)
        _ok(cu.cuMemMap(int(self._ptr) + offset, length, 0, handle, 0))
        self.pieces.append((offset, length))
        _ok(cu.cuMemSetAccess(int(self._ptr) + offset, length, [_access(device_index)], 1))

    def _wrap(self, nbytes: int, device_index: int) -> None:
        import torch     # here, not above: the grader checks for the bindings before it needs torch
        self.tensor = torch.as_tensor(_Window(int(self._ptr), nbytes), device=f"cuda:{device_index}")

    def close(self) -> None:
        """Unmap (and drop this process's hold on the memory); the caller has synchronised
        and keeps no tensor over it."""
        from cuda.bindings import driver as cu
        self.tensor = None
        if self._ptr is not None:
            for offset, length in self.pieces:
                cu.cuMemUnmap(int(self._ptr) + offset, length)
            cu.cuMemAddressFree(self._ptr, self.size)
            self._ptr = None
            self.pieces = []
        for handle in getattr(self, "handles", []):
            cu.cuMemRelease(handle)
        self.handles = []


def _runs(chunks: list[int]) -> list[tuple[int, int]]:
    """Consecutive chunk numbers as (first, count) runs: one piece, one handle, one fd each."""
    runs: list[tuple[int, int]] = []
    for c in sorted(set(chunks)):
        if runs and runs[-1][0] + runs[-1][1] == c:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((c, 1))
    return runs


class Allocation(_Mapped):
    """`nbytes` of device memory, exportable piece by piece as file descriptors (`fds`, one per
    piece). With `backed` ((start, stop) byte ranges), only the granules those ranges touch get
    physical memory, and the first granule, which torch looks at to place the tensor: a
    100,000-block cache of 13 GB whose test reads and writes a few hundred rows costs a few MiB."""

    def __init__(self, nbytes: int, device_index: int, backed: list[tuple[int, int]] | None = None):
        from cuda.bindings import driver as cu
        self.id = next(_ids)
        self.nbytes = nbytes
        self.fds: list[int] = []
        self.piece_ids: list[int] = []
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device_index
        prop.requestedHandleTypes = _fd_type()
        grain = int(_ok(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)))
        chunks = -(-max(1, nbytes) // grain)
        if backed is None:
            runs = [(0, chunks)]
        else:
            wanted = [0] + [c for lo, hi in backed if hi > lo
                            for c in range(max(0, lo) // grain, min(chunks, -(-hi // grain)))]
            runs = _runs(wanted)
        try:
            self._reserve(nbytes, chunks * grain)
            for first, count in runs:
                handle = _ok(cu.cuMemCreate(count * grain, prop, 0))
                self._map_piece(handle, first * grain, count * grain, device_index)
                self.fds.append(int(_ok(cu.cuMemExportToShareableHandle(handle, _fd_type(), 0))))
                self.piece_ids.append(next(_ids))
            self._wrap(nbytes, device_index)
        except BaseException:
            self.close()
            raise

    @property
    def backed_bytes(self) -> int:
        return sum(length for _, length in self.pieces)

    def describe(self) -> dict:
        """What the worker needs to map it: the range, and each piece with the id its fd rides under."""
        return {"id": self.id, "nbytes": self.nbytes, "size": self.size,
                "pieces": [[off, length, pid] for (off, length), pid in zip(self.pieces, self.piece_ids)]}

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        super().close()


class Import(_Mapped):
    """The worker's view of an `Allocation`: its pieces, each from the file descriptor the
    grader sent, mapped at the same offsets."""

    def __init__(self, pieces: list[tuple[int, int, int]], nbytes: int, size: int, device_index: int):
        from cuda.bindings import driver as cu
        try:
            self._reserve(nbytes, size)
            for offset, length, fd in pieces:
                handle = _ok(cu.cuMemImportFromShareableHandle(fd, _fd_type()))
                self._map_piece(handle, offset, length, device_index)
            self._wrap(nbytes, device_index)
        except BaseException:
            self.close()
            raise
