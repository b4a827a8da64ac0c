"""GPU memory a worker of another uid can map: CUDA virtual memory management.

torch shares CUDA tensors by legacy CUDA IPC, and the driver refuses to open such a
handle in a process of another user (measured on the H200 runner: "mapping of
buffer object failed"), so the worker would have to run as root beside the grader.
Memory made by cuMemCreate can instead be exported as a POSIX file descriptor and
handed over a Unix socket (SCM_RIGHTS): holding the descriptor is the permission,
whoever the receiver is. The worker maps it for the length of one request
(see worker.py, `VmmMapping`), and the grader frees it when a test is done.
"""
from __future__ import annotations

import itertools
import os

import torch

_ids = itertools.count(1)


def available() -> bool:
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        return False
    return True


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


class Allocation:
    """`nbytes` of device memory, exportable as a file descriptor; `tensor` is uint8 over it."""

    def __init__(self, nbytes: int, device_index: int):
        from cuda.bindings import driver as cu
        self.id = next(_ids)
        self.nbytes = nbytes
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device_index
        prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        grain = int(_ok(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)))
        self.size = -(-max(1, nbytes) // grain) * grain
        self._handle = _ok(cu.cuMemCreate(self.size, prop, 0))
        self._ptr = None
        self.fd = -1
        try:
            self._ptr = _ok(cu.cuMemAddressReserve(self.size, 0, 0, 0))
            _ok(cu.cuMemMap(self._ptr, self.size, 0, self._handle, 0))
            access = cu.CUmemAccessDesc()
            access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = device_index
            access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            _ok(cu.cuMemSetAccess(self._ptr, self.size, [access], 1))
            self.fd = int(_ok(cu.cuMemExportToShareableHandle(
                self._handle, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)))
        except BaseException:
            self.close()
            raise
        self.tensor = torch.as_tensor(_Window(int(self._ptr), nbytes), device=f"cuda:{device_index}")

    def close(self) -> None:
        """Free the memory; the caller has synchronised and keeps no tensor over it."""
        from cuda.bindings import driver as cu
        self.tensor = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._ptr is not None:
            cu.cuMemUnmap(self._ptr, self.size)
            cu.cuMemAddressFree(self._ptr, self.size)
            self._ptr = None
        if self._handle is not None:
            cu.cuMemRelease(self._handle)
            self._handle = None
