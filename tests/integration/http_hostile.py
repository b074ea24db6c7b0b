#!/usr/bin/env python3
"""sluice integration tests: hostile HTTP clients and upstreams, at random.

    http_hostile.py --plain P --limited L --delay D --upstream U --seed S --seconds T

P, L and D are sluice http listeners in front of tests/integration/http_upstream.py
(on U): P plain (header_timeout 1s, upstream_timeout 2s, max_request 64kb),
L with a limit that refuses almost everything, D with a delay limit. Cases are
drawn from a seeded generator until T seconds have passed, a few connections at
once; each must end or proceed within its deadline (sluice never hangs), and
every response sluice gives must be well-formed HTTP/1.1 with a status that
docs/http.md allows for the case. Requests sluice must refuse carry an
X-Poison field; http_upstream.py counts heads that carry one, and the
caller checks that count stays 0 (nothing of a refused or malformed request
reaches the upstream).

Clients: random bytes; random mutations of valid requests; each split
(byte by byte, random chunks); valid and bad requests pipelined; heads at
and past each cap; disconnects at every point (mid-head, mid-body, while a
request is delayed, mid-response, in a tunnel), half-closes; Expect:
100-continue; chunked bodies with extensions and trailers;
Upgrade; a slowloris. Upstreams (through /raw, /switch, /hangup, /flood1xx):
responses cut at every point, extra responses, 1xx floods, 101 unasked, bad
chunking, close-delimited bodies, HEAD answered with a body, long heads.

Prints "hostile: ok CASES cases, SEED" or the failing case and exits 1.
"""
import argparse
import random
import socket
import sys
import threading
import time

DEADLINE = 6.0  # no case may take longer than this (header_timeout 1s, upstream_timeout 2s)

failures = []
counts = {}
lock = threading.Lock()


def note(kind):
    with lock:
        counts[kind] = counts.get(kind, 0) + 1


def fail(case, why, data=b""):
    with lock:
        failures.append("%s: %s %r" % (case, why, data[:300]))


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def send_split(s, data, rng):
    """Sends <data> cut at random points (sometimes byte by byte)."""
    mode = rng.random()
    if mode < 0.1 and len(data) < 400:
        for i in range(len(data)):
            s.sendall(data[i:i + 1])
        return
    if mode < 0.5:
        s.sendall(data)
        return
    i = 0
    while i < len(data):
        k = rng.randint(1, max(1, len(data) // 3))
        s.sendall(data[i:i + k])
        i += k
        if rng.random() < 0.2:
            time.sleep(0.002)


def read_until_close(s, deadline):
    """Everything until EOF (or a reset); None if the deadline passed first."""
    out = b""
    while True:
        left = deadline - time.time()
        if left <= 0:
            return None
        s.settimeout(left)
        try:
            d = s.recv(65536)
        except socket.timeout:
            return None
        except (ConnectionResetError, BrokenPipeError):
            return out
        if not d:
            return out
        out += d


def parse_responses(data, head_reqs=()):
    """Splits <data> into (status, head, body) of whole responses; returns
    (list, rest). Content-Length and chunked bodies; 1xx/204/304 none."""
    out = []
    i = 0
    nreq = 0
    while True:
        e = data.find(b"\r\n\r\n", i)
        if e < 0:
            return out, data[i:]
        head = data[i:e + 4]
        if not head.startswith(b"HTTP/1.1 ") or len(head) < 12 or not head[9:12].isdigit():
            raise ValueError("not an HTTP/1.1 response: %r" % head[:80])
        st = int(head[9:12])
        fields = {}
        for ln in head.split(b"\r\n")[1:]:
            if ln:
                k, _, v = ln.partition(b":")
                fields[k.strip().lower()] = v.strip()
        j = e + 4
        if st < 200 or st in (204, 304) or nreq in head_reqs:
            pass
        elif fields.get(b"transfer-encoding", b"").lower().split(b",")[-1].strip() == b"chunked":
            while True:
                le = data.find(b"\r\n", j)
                if le < 0:
                    return out, data[i:]
                size = int(data[j:le].split(b";")[0], 16)
                j = le + 2
                if size == 0:
                    te = data.find(b"\r\n\r\n", j - 2)
                    if te < 0:
                        return out, data[i:]
                    j = te + 4
                    break
                if len(data) < j + size + 2:
                    return out, data[i:]
                j += size + 2
        elif b"content-length" in fields:
            n = int(fields[b"content-length"])
            if len(data) < j + n:
                return out, data[i:]
            j += n
        else:
            j = len(data)  # close-delimited
        out.append((st, head, data[e + 4:j]))
        if st >= 200 or st == 101:
            nreq += 1
        i = j


def valid_request(rng, target=None):
    target = target or rng.choice(["/echo", "/echo?a=1", "/fixed?size=300", "/chunked?n=3&size=50",
                                   "/status/204", "/status/304", "/nothing"])
    method = rng.choice(["GET", "GET", "POST", "PUT", "DELETE", "OPTIONS"])
    fields = [b"Host: t"]
    body = b""
    if method in ("POST", "PUT"):
        payload = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
        if rng.random() < 0.5:
            fields.append(b"Content-Length: %d" % len(payload))
            body = payload
        else:
            fields.append(b"Transfer-Encoding: chunked")
            parts = []
            k = 0
            while k < len(payload):
                n = rng.randint(1, 64)
                ext = rng.choice([b"", b";a=b", b';x="q\\"s"', b" ; n"])
                parts.append(b"%x%s\r\n%s\r\n" % (len(payload[k:k + n]), ext, payload[k:k + n]))
                k += n
            trailer = rng.choice([b"", b"X-T: done\r\n"])
            body = b"".join(parts) + b"0\r\n" + trailer + b"\r\n"
    if rng.random() < 0.2:
        fields.append(b"X-Extra: " + b"v" * rng.randint(0, 200))
    return b"%s %s HTTP/1.1\r\n%s\r\n\r\n%s" % (method.encode(), target.encode(), b"\r\n".join(fields), body)


# Requests sluice must refuse (status expected), each carrying X-Poison.
P = b"X-Poison: 1\r\n"
BAD = [
    (400, b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
    (400, b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
    (400, b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Content-Length: +3\r\n\r\nabc"),
    (400, b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Transfer-Encoding: gzip\r\n\r\n"),
    (400, b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
    (400, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"X-A: 1\r\n folded\r\n\r\n"),
    (400, b"GET /echo HTTP/1.1\nHost: t\r\n" + P + b"\r\n"),
    (400, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"X-A: 1\n\r\n"),
    (400, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"X-A: 1\rX\r\n\r\n"),
    (400, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"X-A : 1\r\n\r\n"),
    (400, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"X-A: a\x00b\r\n\r\n"),
    (400, b"GET /ec\x01ho HTTP/1.1\r\nHost: t\r\n" + P + b"\r\n"),
    (400, b"GET /echo HTTP/1.1\r\n" + P + b"\r\n"),
    (400, b"GET /echo HTTP/1.1\r\nHost: t\r\nHost: u\r\n" + P + b"\r\n"),
    (400, b"GET /echo HTTP/2.0\r\nHost: t\r\n" + P + b"\r\n"),
    (400, b"GET echo HTTP/1.1\r\nHost: t\r\n" + P + b"\r\n"),
    (400, b"GET /echo#f HTTP/1.1\r\nHost: t\r\n" + P + b"\r\n"),
    (400, b"\r\n\r\n\r\n\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"\r\n"),
    (414, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: t\r\n" + P + b"\r\n"),
    (431, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"X-A: " + b"a" * 9000 + b"\r\n\r\n"),
    (431, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n"),
    (431, b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"".join(b"X-%d: %s\r\n" % (i, b"b" * 7000) for i in range(10)) + b"\r\n"),
    (413, b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Content-Length: 70000\r\n\r\n"),
]
# Bodies that turn bad after a good head (the head may have gone up): the
# X-Poison marks the head only for the count of heads; these are not poison.
BAD_BODY = [
    b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX",
    b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3;=x\r\nabc\r\n0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n",
    b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n\r\n",
]


def check_answers(case, data, allowed, final_close=True):
    try:
        rs, rest = parse_responses(data)
    except ValueError as e:
        fail(case, str(e), data)
        return []
    for st, head, _ in rs:
        if st not in allowed and not (100 <= st < 200):
            fail(case, "status %d not in %s" % (st, sorted(allowed)), head)
    if rest and final_close:
        # a cut response is allowed only when the upstream cut it
        pass
    return rs


def case_random_bytes(a, rng):
    s = connect(a.plain)
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 2000)))
    try:
        send_split(s, junk, rng)
    except OSError:
        pass
    data = read_until_close(s, time.time() + DEADLINE)
    s.close()
    if data is None:
        fail("random-bytes", "no close within the deadline", junk)
        return
    check_answers("random-bytes", data, {400, 408, 413, 414, 431, 200, 404, 501, 502, 504})


def mutate(rng, req):
    b = bytearray(req)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        i = rng.randrange(len(b)) if b else 0
        if op < 0.4 and b:
            b[i] = rng.randrange(256)
        elif op < 0.7:
            b[i:i] = bytes([rng.choice(b"\r\n \t:;,\x00\x7f0aZ")])
        elif b:
            del b[i]
    return bytes(b)


def case_mutated_pipeline(a, rng):
    """Valid requests with mutated ones among them, then a final GET with
    Connection: close; every answer in order, then the close."""
    s = connect(a.plain)
    reqs = []
    for _ in range(rng.randint(1, 5)):
        r = valid_request(rng)
        if rng.random() < 0.4:
            r = mutate(rng, r)
        reqs.append(r)
    reqs.append(b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    data = b"".join(reqs)
    try:
        send_split(s, data, rng)
    except OSError:
        pass
    got = read_until_close(s, time.time() + DEADLINE)
    s.close()
    if got is None:
        fail("mutated", "no close within the deadline", data)
        return
    check_answers("mutated", got, {200, 204, 304, 404, 400, 408, 413, 414, 431, 501, 502, 504})


def case_bad_request(a, rng):
    """A valid request, then a request sluice must refuse: 200, then its
    status, then the close; the bad one never reaches the upstream."""
    st, bad = rng.choice(BAD)
    s = connect(a.plain)
    data = b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n" + bad
    try:
        send_split(s, data, rng)
    except OSError:
        pass
    got = read_until_close(s, time.time() + DEADLINE)
    s.close()
    if got is None:
        fail("bad-request", "no close within the deadline", bad)
        return
    rs = check_answers("bad-request", got, {200, st})
    sts = [r[0] for r in rs]
    if sts != [200, st]:
        fail("bad-request", "answers %s, expected [200, %d]" % (sts, st), bad)


def case_bad_body(a, rng):
    s = connect(a.plain)
    data = rng.choice(BAD_BODY)
    try:
        send_split(s, data, rng)
    except OSError:
        pass
    got = read_until_close(s, time.time() + DEADLINE)
    s.close()
    if got is None:
        fail("bad-body", "no close within the deadline", data)
        return
    check_answers("bad-body", got, {400, 413, 431, 200, 502})


def case_disconnect(a, rng):
    """A valid exchange cut at a random point by the client (close or
    reset), on any listener; nothing to check but that sluice lives on and
    lets go of the session (checked at the end)."""
    port = rng.choice([a.plain, a.limited, a.delay])
    s = connect(port)
    reqs = b"".join(valid_request(rng) for _ in range(rng.randint(1, 3)))
    cut = rng.randint(0, len(reqs))
    try:
        send_split(s, reqs[:cut], rng)
        if rng.random() < 0.5:
            time.sleep(rng.random() * 0.3)
        if rng.random() < 0.3:
            s.shutdown(socket.SHUT_WR)
            read_until_close(s, time.time() + DEADLINE)
        elif rng.random() < 0.5:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    s.close()


def case_half_close(a, rng):
    """Whole requests then a half-close: every answer, then the close."""
    port = rng.choice([a.plain, a.delay])
    s = connect(port)
    n = rng.randint(1, 4)
    data = b"".join(b"GET /echo?i=%d HTTP/1.1\r\nHost: t\r\n\r\n" % i for i in range(n))
    send_split(s, data, rng)
    s.shutdown(socket.SHUT_WR)
    got = read_until_close(s, time.time() + DEADLINE)
    s.close()
    if got is None:
        fail("half-close", "no close within the deadline", data)
        return
    rs = check_answers("half-close", got, {200})
    if len(rs) != n:
        fail("half-close", "%d answers to %d requests" % (len(rs), n), got)


def case_limited(a, rng):
    """Refused requests (some with bodies, some Expect: 100-continue, some
    Upgrade) among others: 429s in their place."""
    s = connect(a.limited)
    reqs = []
    for _ in range(rng.randint(1, 6)):
        k = rng.random()
        if k < 0.3:
            reqs.append(b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Content-Length: 5\r\n\r\nhello")
        elif k < 0.5:
            reqs.append(b"GET /upgrade HTTP/1.1\r\nHost: t\r\n" + P + b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        elif k < 0.7:
            reqs.append(b"POST /echo HTTP/1.1\r\nHost: t\r\n" + P +
                        b"Transfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: 1\r\n\r\n")
        else:
            reqs.append(b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"\r\n")
    reqs.append(b"GET /echo HTTP/1.1\r\nHost: t\r\n" + P + b"Connection: close\r\n\r\n")
    data = b"".join(reqs)
    try:
        send_split(s, data, rng)
    except OSError:
        pass
    got = read_until_close(s, time.time() + DEADLINE)
    s.close()
    if got is None:
        fail("limited", "no close within the deadline", data)
        return
    rs = check_answers("limited", got, {429})
    if len(rs) != len(reqs):
        fail("limited", "%d answers to %d requests" % (len(rs), len(reqs)), got)


def case_expect(a, rng):
    s = connect(a.plain)
    body = b"x" * rng.randint(0, 100)
    s.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    if body:
        time.sleep(0.05)
        send_split(s, body, rng)
    s.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    got = read_until_close(s, time.time() + DEADLINE)
    s.close()
    if got is None:
        fail("expect", "no close within the deadline")
        return
    rs = check_answers("expect", got, {200})
    finals = [r for r in rs if r[0] >= 200]
    if len(finals) != 2:
        fail("expect", "%d final answers to 2 requests" % len(finals), got)


def case_tunnel(a, rng):
    """Upgrade or CONNECT-like tunnels, cut at a random point."""
    s = connect(a.plain)
    s.sendall(b"GET /upgrade HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nearly")
    payload = bytes(rng.randrange(256) for _ in range(rng.randint(0, 5000)))
    try:
        send_split(s, payload, rng)
        if rng.random() < 0.5:
            s.shutdown(socket.SHUT_WR)
            got = read_until_close(s, time.time() + DEADLINE)
            if got is None:
                fail("tunnel", "no close after the half-close")
            elif not got.startswith(b"HTTP/1.1 101") or not got.endswith(b"early" + payload):
                fail("tunnel", "tunnel bytes differ", got[-100:])
    except OSError:
        pass
    s.close()


def case_slowloris(a, rng):
    s = connect(a.plain)
    t0 = time.time()
    data = b"GET /echo HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 100
    try:
        for i in range(len(data)):
            s.sendall(data[i:i + 1])
            time.sleep(0.05)
            if time.time() - t0 > 2.5:
                break
    except OSError:
        pass
    got = read_until_close(s, t0 + DEADLINE)
    s.close()
    if got is None:
        fail("slowloris", "no close within the deadline")
        return
    rs = check_answers("slowloris", got, {408})
    if [r[0] for r in rs] != [408]:
        fail("slowloris", "expected a 408", got)


def raw_response(rng):
    """A response, valid or not, for /raw."""
    body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
    k = rng.random()
    if k < 0.3:
        r = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    elif k < 0.5:
        r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x;e=1\r\n%s\r\n0\r\nT: v\r\n\r\n" % (len(body), body)
    elif k < 0.6:
        r = b"HTTP/1.1 102 Processing\r\n\r\n" * rng.randint(1, 50) + b"HTTP/1.1 204 No\r\n\r\n"
    elif k < 0.7:
        r = b"HTTP/1.1 200 OK\r\nX-Long: " + b"h" * rng.choice([100, 8000, 9000, 70000]) + b"\r\nContent-Length: 0\r\n\r\n"
    elif k < 0.8:
        r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    else:
        r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + rng.choice([b"zz\r\n", b"3\r\nabcd", b"3\nabc\r\n0\r\n\r\n"])
    if rng.random() < 0.4:
        r = mutate(rng, r)
    return r


def case_hostile_upstream(a, rng):
    """The upstream sends odd or cut responses; the client gets a
    well-formed answer, or a 502/504, or the close, within the deadline."""
    s = connect(a.plain)
    k = rng.random()
    if k < 0.6:
        r = raw_response(rng)
        cut = rng.randint(0, len(r)) if rng.random() < 0.4 else len(r)
        close = 1 if cut < len(r) or rng.random() < 0.5 else 0
        req = b"GET /raw?hex=%s&close=%d HTTP/1.1\r\nHost: t\r\n\r\n" % (r[:cut].hex().encode(), close)
        if len(req) > 8000:
            req = b"GET /raw?hex=%s&close=1 HTTP/1.1\r\nHost: t\r\n\r\n" % r[:3900].hex().encode()
    elif k < 0.7:
        req = b"GET /switch HTTP/1.1\r\nHost: t\r\n\r\n"
    elif k < 0.8:
        req = b"GET /hangup HTTP/1.1\r\nHost: t\r\n\r\n"
    elif k < 0.9:
        req = b"GET /flood1xx?n=%d HTTP/1.1\r\nHost: t\r\n\r\n" % rng.randint(1, 3000)
    else:
        req = b"HEAD /raw?hex=%s&close=1 HTTP/1.1\r\nHost: t\r\n\r\n" % (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").hex().encode()
    if rng.random() < 0.5:
        req += b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"
    req += b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    try:
        send_split(s, req, rng)
    except OSError:
        pass
    deadline = time.time() + DEADLINE
    got = read_until_close(s, deadline)
    s.close()
    if got is None:
        fail("upstream", "no close within the deadline", req)
        return
    try:
        parse_responses(got, head_reqs=(0,) if req.startswith(b"HEAD") else ())
    except ValueError as e:
        fail("upstream", str(e), got)


CASES = [
    (case_random_bytes, 3), (case_mutated_pipeline, 4), (case_bad_request, 4), (case_bad_body, 2),
    (case_disconnect, 3), (case_half_close, 2), (case_limited, 2), (case_expect, 1),
    (case_tunnel, 1), (case_slowloris, 0.2), (case_hostile_upstream, 5),
]


def worker(a, seed, until):
    rng = random.Random(seed)
    total = sum(w for _, w in CASES)
    while time.time() < until and not failures:
        x = rng.random() * total
        for fn, w in CASES:
            x -= w
            if x < 0:
                break
        try:
            fn(a, rng)
        except OSError as e:
            fail(fn.__name__, "client error %s" % e)
        note(fn.__name__)


def main():
    ap = argparse.ArgumentParser()
    for k in ("plain", "limited", "delay", "upstream", "seed"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--workers", type=int, default=4)
    a = ap.parse_args()
    until = time.time() + a.seconds
    ts = [threading.Thread(target=worker, args=(a, a.seed * 1000 + i, until)) for i in range(a.workers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    n = sum(counts.values())
    if failures:
        for f in failures[:10]:
            print("FAIL", f)
        print("hostile: %d failures in %d cases, seed %d" % (len(failures), n, a.seed))
        return 1
    print("hostile: ok %d cases, seed %d (%s)" % (n, a.seed, ", ".join(
        "%s %d" % (k[5:], v) for k, v in sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
