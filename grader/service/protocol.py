"""uvicorn's HTTP/1.1 protocol (h11) with one change: a request h11 cannot read (headers over
its limit, a malformed request line) is answered, like every other refusal of the service, with
JSON {"error": sentence}, rather than uvicorn's plain-text "Invalid HTTP request received.".
"""
from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .limits import HEAD_TOO_LARGE, MAX_HEAD


class JsonErrorsH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        pending = len(self.conn.trailing_data[0])
        if pending >= MAX_HEAD:
            status, reason = 431, b"Request Header Fields Too Large"
            sentence = HEAD_TOO_LARGE
        else:
            status, reason = 400, b"Bad Request"
            sentence = "the request could not be read as HTTP/1.1: send it with curl, a browser or the course's client"
        body = json.dumps({"error": sentence}).encode()
        for event in (h11.Response(status_code=status, reason=reason, headers=[
                          (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                          (b"connection", b"close")]),
                      h11.Data(data=body), h11.EndOfMessage()):
            try:
                self.transport.write(self.conn.send(event))
            except h11.LocalProtocolError:       # the connection is in no state to answer: just close it
                break
        self.transport.close()
