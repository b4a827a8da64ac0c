"""GPU memory a worker of another uid can map: CUDA virtual memory management.

torch shares CUDA tensors by legacy CUDA IPC, and the driver refuses to open such a
handle in a process of another user (measured on the H200 runner: "mapping of
buffer object failed"), so the worker would have to run as root beside the grader.
Memory made by cuMemCreate can instead be exported as a POSIX file descriptor and
handed over a Unix socket (SCM_RIGHTS): holding the descriptor is the permission,
whoever the receiver is. The grader makes an `Allocation`; the worker maps it as an
`Import` for the length of one request, and the grader frees it when a test is done.
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


class _Mapped:
    """A physical allocation mapped read-write into this process; `tensor` is uint8 over it."""

    _handle = _ptr = None
    tensor = None

    def _map(self, handle, nbytes: int, size: int, device_index: int) -> None:
        from cuda.bindings import driver as cu
        self.size, self._handle = size, handle
        self._ptr = _ok(cu.cuMemAddressReserve(size, 0, 0, 0))
        _ok(cu.cuMemMap(self._ptr, size, 0, handle, 0))
        access = cu.CUmemAccessDesc()
        access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = device_index
        access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _ok(cu.cuMemSetAccess(self._ptr, size, [access], 1))
        import torch     # here, not above: the grader checks for the bindings before it needs torch
        self.tensor = torch.as_tensor(_Window(int(self._ptr), nbytes), device=f"cuda:{device_index}")

    def close(self) -> None:
        """Unmap (and drop this process's hold on the memory); the caller has synchronised
        and keeps no tensor over it."""
        from cuda.bindings import driver as cu
        self.tensor = None
        if self._ptr is not None:
            cu.cuMemUnmap(self._ptr, self.size)
            cu.cuMemAddressFree(self._ptr, self.size)
            self._ptr = None
        if self._handle is not None:
            cu.cuMemRelease(self._handle)
            self._handle = None


class Allocation(_Mapped):
    """`nbytes` of new device memory, exportable as the file descriptor `fd`."""

    def __init__(self, nbytes: int, device_index: int):
        from cuda.bindings import driver as cu
        self.id = next(_ids)
        self.nbytes = nbytes
        self.fd = -1
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device_index
        prop.requestedHandleTypes = _fd_type()
        grain = int(_ok(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)))
        size = -(-max(1, nbytes) // grain) * grain
        try:
            self._map(_ok(cu.cuMemCreate(size, prop, 0)), nbytes, size, device_index)
            self.fd = int(_ok(cu.cuMemExportToShareableHandle(self._handle, _fd_type(), 0)))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        super().close()


class Import(_Mapped):
    """The worker's view of an `Allocation`, from the file descriptor the grader sent."""

    def __init__(self, fd: int, nbytes: int, size: int, device_index: int):
        from cuda.bindings import driver as cu
        try:
            self._map(_ok(cu.cuMemImportFromShareableHandle(fd, _fd_type())), nbytes, size, device_index)
        except BaseException:
            self.close()
            raise
