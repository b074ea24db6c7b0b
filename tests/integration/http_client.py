#!/usr/bin/env python3
"""sluice integration tests: Python's http.client through sluice.

Run by test_http (test_python_http_client) as `http_client.py PLAIN LIMITED`:
PLAIN is an http listener in front of http_upstream.py, LIMITED the same
with a limit of one request a minute per client. Prints "http.client: ok"
and exits 0 when every check holds, else says which failed and exits 1.
"""
import hashlib
import http.client
import json
import sys


def pattern(n):
    return bytes(((i % 251) * 7 + 13) % 251 for i in range(n))


def check(cond, what):
    if not cond:
        print("http.client: FAILED: " + what)
        sys.exit(1)


def main():
    plain, limited = int(sys.argv[1]), int(sys.argv[2])
    c = http.client.HTTPConnection("127.0.0.1", plain, timeout=10)
    conn = None
    # keep-alive: one upstream connection, requests numbered on it
    for i in range(1, 6):
        c.request("GET", "/echo?i=%d" % i)
        r = c.getresponse()
        doc = json.loads(r.read())
        check(r.status == 200, "GET status %d" % r.status)
        check(doc["nreq"] == i, "request %d was number %d upstream" % (i, doc["nreq"]))
        conn = conn or doc["conn"]
        check(doc["conn"] == conn, "a new upstream connection for request %d" % i)
    # a body by Content-Length and one chunked
    body = pattern(300000)
    c.request("POST", "/echo", body=body)
    r = c.getresponse()
    doc = json.loads(r.read())
    check(doc["body_len"] == len(body), "POST length %d" % doc["body_len"])
    check(doc["body_sha256"] == hashlib.sha256(body).hexdigest(), "POST body differs")
    c.request("POST", "/echo", body=iter([body[:1000], body[1000:200000], body[200000:]]),
              encode_chunked=True, headers={"Transfer-Encoding": "chunked"})
    r = c.getresponse()
    doc = json.loads(r.read())
    check(doc["body_len"] == len(body), "chunked POST length %d" % doc["body_len"])
    check(doc["body_sha256"] == hashlib.sha256(body).hexdigest(), "chunked POST body differs")
    # HEAD, a chunked download, 204: the connection stays in step
    c.request("HEAD", "/fixed?size=1000")
    r = c.getresponse()
    check(r.status == 200 and r.getheader("Content-Length") == "1000" and r.read() == b"",
          "HEAD answered wrong")
    c.request("GET", "/chunked?n=20&size=1000")
    r = c.getresponse()
    data = r.read()
    check(hashlib.sha256(data).hexdigest() == r.getheader("X-Body-Sha256"), "chunked download differs")
    c.request("GET", "/status/204")
    r = c.getresponse()
    check(r.status == 204 and r.read() == b"", "204 answered wrong")
    c.request("GET", "/echo")
    r = c.getresponse()
    check(json.loads(r.read())["conn"] == conn, "the connection was not kept to the end")
    c.close()
    # the limited listener: 200, then 429 with Retry-After and problem+json
    lc = http.client.HTTPConnection("127.0.0.1", limited, timeout=10)
    lc.request("GET", "/echo")
    r = lc.getresponse()
    r.read()
    check(r.status == 200, "first limited request: %d" % r.status)
    lc.request("GET", "/echo")
    r = lc.getresponse()
    text = r.read()
    check(r.status == 429, "second limited request: %d" % r.status)
    check((r.getheader("Retry-After") or "").isdigit(), "Retry-After: %r" % r.getheader("Retry-After"))
    check((r.getheader("Content-Type") or "").startswith("application/problem+json"),
          "Content-Type: %r" % r.getheader("Content-Type"))
    check(json.loads(text).get("status") == 429, "problem body %r" % text)
    lc.close()
    print("http.client: ok")


if __name__ == "__main__":
    main()
