"""Sizes the front door refuses above (without the web stack: protocol.py and app.py share them)."""
MAX_HEAD = 64 * 1024        # the request line and headers together; a browser's are far below
HEAD_TOO_LARGE = (f"the request's headers are larger than {MAX_HEAD // 1024} KiB, which no client of this service "
                  "sends: send only the Authorization and Content-Type headers")
