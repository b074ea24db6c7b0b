#!/usr/bin/env python3
"""sluice integration tests: an HTTP/1.1 upstream for odd responses.

Standard library only, raw sockets, one thread per connection. Started by
the harness (th_pyup_start) as `http_upstream.py PORT`; prints "listening
PORT" once it accepts. Every connection is keep-alive unless a request or a
response says otherwise. Request bodies are read by Content-Length or
chunked (trailers included). What a request gets depends on its path:

  /echo...            JSON: method, target, version, headers (lower-case
                      name -> value, repeats joined by ", "), trailers,
                      body_len, body_sha256, conn (connection serial),
                      nreq (request number on that connection)
  /echo?close=1       the same, with "Connection: close", then close
  /fixed?size=N       N bytes of the pattern (Content-Length; HEAD: no body)
  /chunked?n=K&size=S K chunks of S bytes, trailer X-Trailer: done;
                      header X-Body-Sha256 says what the body hashes to
  /close?size=N       N bytes delimited by close (no Content-Length, no TE)
  /status/CODE        that status (204, 304: no body, 304 with a
                      Content-Length: 5 it does not send)
  /upgrade            with Upgrade: 101 Switching Protocols, then every
                      byte is echoed back until EOF
  /malformed          a status line that is not HTTP
  /malformed-cl       Content-Length: abc
  /slow?secs=N        nothing for N seconds, then 200 "late"
  /clte               both Content-Length and Transfer-Encoding: chunked
  /switch            101 Switching Protocols, though nothing asked to upgrade
  /hangup             closes without answering
  /flood1xx?n=N       N interim "102 Processing" responses, then 200
  /raw?hex=H&close=C  the bytes H (hex) as they are, as the response; then
                      closes if C is 1 (tests/integration/http_hostile.py)
  /__stats            (not counted) JSON: connections, heads, requests,
                      bytes received, over every other connection; poison:
                      heads that carried an X-Poison field (sent only in
                      requests sluice must refuse)

A request with "Expect: 100-continue" gets "100 Continue" before its body
is read. The pattern of N bytes is bytes((i * 7 + 13) % 251 for i in range(N)).
"""
import hashlib
import json
import socket
import sys
import threading
import time
import urllib.parse

MAX_HEAD = 1 << 20

lock = threading.Lock()
serial = 0
closed_totals = {"connections": 0, "heads": 0, "requests": 0, "bytes": 0}
poison = 0
live = set()


def pattern(n):
    base = bytes((i * 7 + 13) % 251 for i in range(251 * 64))
    out = bytearray()
    while len(out) < n:
        out += base
    # the pattern restarts every 251 bytes: i % 251 is all that matters
    return bytes(out[:n])


class Conn:
    def __init__(self, sock, serial_no):
        self.sock = sock
        self.serial = serial_no
        self.buf = b""
        self.bytes = 0
        self.heads = 0
        self.requests = 0
        self.control = False

    def fill(self):
        data = self.sock.recv(262144)
        if not data:
            raise EOFError
        self.bytes += len(data)
        self.buf += data

    def line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                out, self.buf = self.buf[:i], self.buf[i + 2:]
                return out
            if len(self.buf) > MAX_HEAD:
                raise ValueError("line too long")
            self.fill()

    def exact(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, data):
        self.sock.sendall(data)


def read_fields(c):
    fields = []
    while True:
        ln = c.line()
        if ln == b"":
            return fields
        name, _, value = ln.partition(b":")
        fields.append((name.decode("latin-1"), value.strip().decode("latin-1")))


def field_map(fields):
    m = {}
    for k, v in fields:
        k = k.lower()
        m[k] = m[k] + ", " + v if k in m else v
    return m


def read_body(c, hdr):
    """Returns (length, sha256 hex, trailers) of the request body."""
    h = hashlib.sha256()
    n = 0
    trailers = {}
    te = hdr.get("transfer-encoding", "").lower()
    if "chunked" in te:
        while True:
            size = int(c.line().split(b";")[0], 16)
            if size == 0:
                trailers = field_map(read_fields(c))
                break
            while size > 0:
                if not c.buf:
                    c.fill()
                take = c.buf[:size]
                c.buf = c.buf[len(take):]
                h.update(take)
                n += len(take)
                size -= len(take)
            if c.exact(2) != b"\r\n":
                raise ValueError("chunk without CRLF")
    elif "content-length" in hdr:
        left = int(hdr["content-length"])
        while left > 0:
            if not c.buf:
                c.fill()
            take = c.buf[:left]
            c.buf = c.buf[len(take):]
            h.update(take)
            n += len(take)
            left -= len(take)
    return n, h.hexdigest(), trailers


def respond(c, status, reason, headers, body=b"", head_only=False):
    out = ["HTTP/1.1 %d %s" % (status, reason)]
    out += ["%s: %s" % kv for kv in headers]
    c.send(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body))


def stats():
    with lock:
        t = dict(closed_totals)
        t["poison"] = poison
        for c in live:
            if not c.control:
                t["connections"] += 1
                t["heads"] += c.heads
                t["requests"] += c.requests
                t["bytes"] += c.bytes
    return t


def handle(c):
    """Serves requests on <c> until either side closes."""
    while True:
        try:
            start = c.line()
        except EOFError:
            return
        method, target, version = start.decode("latin-1").split(" ", 2)
        fields = read_fields(c)
        hdr = field_map(fields)
        if "x-poison" in hdr:
            global poison
            with lock:
                poison += 1
        url = urllib.parse.urlsplit(target)
        path = url.path
        q = dict(urllib.parse.parse_qsl(url.query))
        if c.heads == 0 and c.requests == 0 and path == "/__stats":
            with lock:
                c.control = True
        if not c.control:
            c.heads += 1
        if hdr.get("expect", "").lower() == "100-continue":
            c.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        body_len, body_sha, trailers = read_body(c, hdr)
        if not c.control:
            c.requests += 1
        conn_hdr = hdr.get("connection", "").lower()
        close = (version == "HTTP/1.0" and "keep-alive" not in conn_hdr) or "close" in conn_hdr
        head = method == "HEAD"
        ka = [("Connection", "close")] if close else []

        if path == "/__stats":
            body = json.dumps(stats(), separators=(",", ":")).encode()
            respond(c, 200, "OK", [("Content-Type", "application/json"),
                                   ("Content-Length", len(body))] + ka, body)
        elif path.startswith("/echo"):
            if q.get("close") == "1":
                close = True
                ka = [("Connection", "close")]
            doc = {"method": method, "target": target, "version": version,
                   "headers": hdr, "trailers": trailers, "body_len": body_len,
                   "body_sha256": body_sha, "conn": c.serial, "nreq": c.requests}
            body = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
            respond(c, 200, "OK", [("Content-Type", "application/json"),
                                   ("Content-Length", len(body))] + ka, body, head)
        elif path == "/fixed":
            body = pattern(int(q.get("size", "100")))
            respond(c, 200, "OK", [("Content-Length", len(body)),
                                   ("X-Body-Sha256", hashlib.sha256(body).hexdigest())] + ka,
                    body, head)
        elif path == "/chunked":
            k, s = int(q.get("n", "10")), int(q.get("size", "1000"))
            body = pattern(k * s)
            respond(c, 200, "OK", [("Transfer-Encoding", "chunked"), ("Trailer", "X-Trailer"),
                                   ("X-Body-Sha256", hashlib.sha256(body).hexdigest())] + ka,
                    b"", True)
            if not head:
                for i in range(k):
                    c.send(b"%x\r\n" % s + body[i * s:(i + 1) * s] + b"\r\n")
                c.send(b"0\r\nX-Trailer: done\r\n\r\n")
        elif path == "/close":
            body = pattern(int(q.get("size", "1000")))
            respond(c, 200, "OK", [("X-Body-Sha256", hashlib.sha256(body).hexdigest()),
                                   ("Connection", "close")], body, head)
            return
        elif path.startswith("/status/"):
            code = int(path[8:])
            extra = [("ETag", '"v1"'), ("Content-Length", "5")] if code == 304 else []
            respond(c, code, "Status", extra + ka)
        elif path == "/upgrade" and "upgrade" in hdr:
            respond(c, 101, "Switching Protocols", [("Upgrade", hdr["upgrade"]),
                                                    ("Connection", "Upgrade")])
            if c.buf:
                c.send(c.buf)
                c.buf = b""
            while True:
                try:
                    data = c.sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                c.bytes += len(data)
                c.send(data)
        elif path == "/switch":
            respond(c, 101, "Switching Protocols", [("Upgrade", "nothing")])
            while c.sock.recv(65536):
                pass
            return
        elif path == "/hangup":
            return
        elif path == "/flood1xx":
            c.send(b"HTTP/1.1 102 Processing\r\n\r\n" * int(q.get("n", "100")))
            respond(c, 200, "OK", [("Content-Length", 2)] + ka, b"ok", head)
        elif path == "/raw":
            c.send(bytes.fromhex(q.get("hex", "")))
            if q.get("close") == "1":
                return
        elif path == "/malformed":
            c.send(b"HTTX/9.9 what is this\r\n\r\nhello")
            return
        elif path == "/malformed-cl":
            c.send(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhello")
            return
        elif path == "/slow":
            time.sleep(float(q.get("secs", "3")))
            respond(c, 200, "OK", [("Content-Length", 4)] + ka, b"late", head)
        elif path == "/clte":
            c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\nhello\r\n0\r\n\r\n")
        else:
            respond(c, 404, "Not Found", [("Content-Length", 0)] + ka, b"", head)
        if close:
            return


def serve(sock, serial_no):
    c = Conn(sock, serial_no)
    with lock:
        live.add(c)
    try:
        handle(c)
    except (EOFError, OSError, ValueError):
        pass
    finally:
        with lock:
            live.discard(c)
            if not c.control:
                closed_totals["connections"] += 1
                closed_totals["heads"] += c.heads
                closed_totals["requests"] += c.requests
                closed_totals["bytes"] += c.bytes
        try:
            sock.close()
        except OSError:
            pass


def main():
    global serial
    port = int(sys.argv[1])
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(256)
    print("listening %d" % port, flush=True)
    while True:
        s, _ = ls.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with lock:
            serial += 1
            n = serial
        threading.Thread(target=serve, args=(s, n), daemon=True).start()


if __name__ == "__main__":
    main()
