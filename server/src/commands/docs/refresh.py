#!/usr/bin/env python3
"""Writes redis-7.0.15.resp: redis-server 7.0.15's reply to `COMMAND DOCS` in RESP3, which
`COMMAND DOCS` in Shale serves (see ../docs.rs). Run against a real redis-server 7.0.15:

    redis-server --port 7790 --save '' --daemonize yes
    python3 server/src/commands/docs/refresh.py 7790
"""
import os
import socket
import sys


def end_of_value(buf, pos):
    """The offset just past the RESP3 value at `pos`, or None if it is incomplete."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    kind, line, p = buf[pos:pos + 1], buf[pos + 1:nl], nl + 2
    if kind in b"+-:_,#(":
        return p
    if kind in b"$=!":
        n = int(line)
        return p if n < 0 else (p + n + 2 if len(buf) >= p + n + 2 else None)
    n = int(line) * (2 if kind in b"%|" else 1)
    for _ in range(max(n, 0)):
        p = end_of_value(buf, p)
        if p is None:
            return None
    return p


def reply(sock, request, buf=b""):
    sock.sendall(request)
    while True:
        end = end_of_value(buf, 0) if buf else None
        if end:
            return buf[:end], buf[end:]
        buf += sock.recv(65536)


sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
_, rest = reply(sock, b"HELLO 3\r\n")
docs, _ = reply(sock, b"COMMAND DOCS\r\n", rest)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "redis-7.0.15.resp")
with open(out, "wb") as f:
    f.write(docs)
print(f"{out}: {len(docs)} bytes")
