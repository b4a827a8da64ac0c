"""A VMM allocation backed only where a test will touch it (vmm.Allocation(backed=...)): the
100,000-block int64 caches cost a few MiB instead of 26 GB, and a store anywhere else is an
illegal memory access, as a store outside any allocation is. Needs a GPU and cuda-bindings;
the CPU half (the piece arithmetic) runs everywhere."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.sandbox import vmm

SANDBOX = Path(__file__).resolve().parents[3] / "grader" / "sandbox"


def test_consecutive_granules_become_one_piece():
    assert vmm._runs([5, 0, 1, 2, 9, 6, 2]) == [(0, 3), (5, 2), (9, 1)]
    assert vmm._runs([]) == []


def _gpu():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and vmm.available()


needs_gpu = pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU and the cuda-bindings package")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=SANDBOX, capture_output=True,
                          text=True, timeout=120)


PRELUDE = """
    import torch, vmm
    torch.cuda.init()
    nbytes = 13 << 30
    grain = 2 << 20
    backed = [(5 * grain + 100, 5 * grain + 200), (100 * grain, 102 * grain)]
    a = vmm.Allocation(nbytes, 0, backed)
    free, total = torch.cuda.mem_get_info()
    print("pieces", a.pieces, "backed", a.backed_bytes)
    t = a.tensor
"""


@needs_gpu
def test_only_the_named_ranges_and_the_first_granule_get_memory_and_they_work():
    run = _run(PRELUDE + """
    assert len(a.pieces) <= 3 and a.backed_bytes < 64 << 20, (a.pieces, a.backed_bytes)
    t[5 * grain + 100: 5 * grain + 200].fill_(7)
    t[100 * grain: 102 * grain].fill_(3)
    torch.cuda.synchronize()
    assert int(t[5 * grain + 150]) == 7 and int(t[102 * grain - 1]) == 3
    a.close()
    print("ok")
    """)
    assert run.returncode == 0 and "ok" in run.stdout, run.stdout + run.stderr


@needs_gpu
def test_a_store_outside_the_backed_ranges_is_an_illegal_memory_access():
    run = _run(PRELUDE + """
    t[50 * grain].fill_(1)
    torch.cuda.synchronize()
    print("wrote unbacked memory")
    """)
    assert "wrote unbacked memory" not in run.stdout
    assert run.returncode != 0 and "illegal" in run.stderr.lower(), run.stderr[-2000:]


@needs_gpu
def test_a_worker_of_the_sandbox_maps_the_same_pieces(tmp_path):
    """The pieces cross as file descriptors, one each, and map at the same offsets."""
    run = _run(PRELUDE + """
    import os, socket
    from wire import send, recv_with_fds
    t[100 * grain: 102 * grain].fill_(9)
    torch.cuda.synchronize()
    parent, child = socket.socketpair()
    send(parent, {"op": "x", "fds": a.piece_ids}, fds=a.fds)
    msg, _, fds = recv_with_fds(child)
    d = a.describe()
    byid = dict(zip(msg["fds"], fds))
    b = vmm.Import([(o, n, byid[i]) for o, n, i in d["pieces"]], d["nbytes"], d["size"], 0)
    assert int(b.tensor[101 * grain]) == 9
    b.tensor[100 * grain] = 4
    torch.cuda.synchronize()
    assert int(t[100 * grain]) == 4
    b.close(); a.close()
    print("ok")
    """)
    assert run.returncode == 0 and "ok" in run.stdout, run.stdout + run.stderr
