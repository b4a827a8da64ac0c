"""Probes the sandbox from inside: the network, the world-writable folders, the memory cap."""
import os
import socket


def add_into(x, y):
    x.add_(y)


def echo(value):
    return value


def connect(port):
    """True if a TCP connection to 127.0.0.1:port was made."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def datagram_out():
    """True if a UDP datagram to an outside address was sent."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"x", ("203.0.113.7", 53))
        return True
    except OSError:
        return False


def fill(folder, name, limit):
    """Bytes written to folder/name before a write failed or `limit` was reached."""
    done, chunk = 0, b"\1" * (1 << 20)
    try:
        with open(os.path.join(folder, name), "wb") as f:
            while done < limit:
                f.write(chunk)
                f.flush()
                done += len(chunk)
    except OSError:
        pass
    return done


def grab(nbytes):
    """Allocates and touches nbytes."""
    return len(bytearray(nbytes))
