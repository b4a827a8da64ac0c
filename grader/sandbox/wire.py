"""The wire between the trusted grader and the sandboxed worker.

A message is a JSON header followed by raw binary blobs, all length-prefixed,
over a Unix socket. No pickle crosses the wire in either direction: the trusted
side only ever parses JSON and copies bytes into tensors whose dtype and shape
it has checked. This file is copied into the sandbox beside worker.py, so it
imports nothing from the grader.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time

MAX_HEADER = 16 << 20          # bytes; a larger header is a broken or hostile peer
MAX_BLOB = 1 << 30             # one returned tensor's bytes
MAX_TOTAL = 2 << 30            # all of one message's blobs together
_LEN = struct.Struct("!Q")

# dtypes that may cross the wire, by the name torch prints without "torch."
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16",
          "int32", "int64", "bool")


class WireError(Exception):
    """The peer sent something that is not a well-formed message."""


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    """n bytes, all of them before `deadline` (time.monotonic()): a peer that trickles its
    answer a byte at a time must not stretch the timeout read by read."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("deadline passed while reading")
            sock.settimeout(left)
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the connection")
        got += k
    return bytes(buf)


MAX_FDS = 250                  # file descriptors with one message: GPU memory pieces (vmm.py);
                               # Linux takes at most 253 in one SCM_RIGHTS message


def send(sock: socket.socket, header: dict, blobs: list[bytes] = (), fds: list[int] = ()) -> None:
    """Send one message; `fds` ride with its first bytes (SCM_RIGHTS), grader to worker only."""
    head = json.dumps(dict(header, blobs=[len(b) for b in blobs])).encode()
    prefix = _LEN.pack(len(head))
    if fds:
        sent = socket.send_fds(sock, [prefix], list(fds))
        sock.sendall(prefix[sent:] + head)
    else:
        sock.sendall(prefix + head)
    for blob in blobs:
        sock.sendall(blob)


def recv_with_fds(sock: socket.socket) -> tuple[dict, list[bytes], list[int]]:
    """The worker's side of `send` with fds: (header, blobs, the descriptors received)."""
    data, fds, flags, _ = socket.recv_fds(sock, _LEN.size, MAX_FDS)
    if not data:
        raise EOFError("peer closed the connection")
    if flags & getattr(socket, "MSG_CTRUNC", 0):
        for fd in fds:
            os.close(fd)
        raise WireError("too many file descriptors with one message")
    header, blobs = recv(sock, first=data + _recv_exact(sock, _LEN.size - len(data), None))
    return header, blobs, fds


def recv(sock: socket.socket, max_blob: int = MAX_BLOB,
         deadline: float | None = None, first: bytes | None = None) -> tuple[dict, list[bytes]]:
    (n,) = _LEN.unpack(first if first is not None else _recv_exact(sock, _LEN.size, deadline))
    if n > MAX_HEADER:
        raise WireError(f"header of {n} bytes exceeds the limit")
    try:
        header = json.loads(_recv_exact(sock, n, deadline))
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("header is not an object")
    sizes = header.pop("blobs", [])
    if not isinstance(sizes, list) or not all(isinstance(s, int) and 0 <= s <= max_blob for s in sizes) \
            or sum(sizes) > MAX_TOTAL:
        raise WireError("bad blob sizes")
    return header, [_recv_exact(sock, s, deadline) for s in sizes]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode())


MAX_DEPTH = 16


def encode(value, on_tensor, tensor_type, depth: int = 0):
    """A JSON-able form of an argument or result; tensors go through on_tensor."""
    if depth > MAX_DEPTH:
        raise TypeError("value nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tensor_type):
        return {"tensor": on_tensor(value)}
    if isinstance(value, (list, tuple)):
        return {"seq": type(value).__name__ if type(value) in (list, tuple) else "tuple",
                "items": [encode(v, on_tensor, tensor_type, depth + 1) for v in value]}
    raise TypeError(f"a {type(value).__name__} cannot cross into or out of the sandbox")


def decode(obj, on_tensor, depth: int = 0):
    """Inverse of encode, strict about shape: anything unexpected is a WireError."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, dict) and set(obj) == {"tensor"}:
        return on_tensor(obj["tensor"])
    if isinstance(obj, dict) and set(obj) == {"seq", "items"} and obj["seq"] in ("list", "tuple") \
            and isinstance(obj["items"], list):
        items = [decode(v, on_tensor, depth + 1) for v in obj["items"]]
        return tuple(items) if obj["seq"] == "tuple" else items
    raise WireError(f"unexpected value {str(obj)[:80]!r}")
