#!/usr/bin/env python3
"""Writes the command table of src/proto/resp_acl.c from a running Redis.

    redis-cli -p PORT --json COMMAND INFO | tests/tools/gen_resp_acl.py > table.c

Run once against Debian 12's redis-server 7.0.15 and pasted into
src/proto/resp_acl.c between the "generated" markers; WAITAOF (7.2) is
added by hand there. tests/integration/test_resp_acl.c checks the table
against the installed redis-server's ACL CAT, category by category.
"""
import json
import sys

# Redis 7.0's ACL CAT order: the bit of each category.
CATS = ["keyspace", "read", "write", "set", "sortedset", "list", "hash", "string",
        "bitmap", "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow",
        "blocking", "dangerous", "connection", "transaction", "scripting"]
SHORT = {c: "C_" + c.upper() for c in CATS}


def mask(cats):
    names = [SHORT[c.lstrip("@")] for c in CATS if "@" + c in cats]
    return " | ".join(names) if names else "0"


cmds = json.load(sys.stdin)
cmds.sort(key=lambda c: c[0].upper())
subs = []
out = ["static const struct acl_cmd cmds[] = {"]
for c in cmds:
    name = c[0].upper()
    first, n = 0, 0
    if c[9]:
        sc = sorted(c[9], key=lambda s: s[0].split("|", 1)[1].upper())
        first, n = len(subs), len(sc)
        for s in sc:
            subs.append((s[0].split("|", 1)[1].upper(), mask(s[6])))
    out.append('    { "%s", %s, %d, %d },' % (name, mask(c[6]), first, n))
out.append("};")
out.append("")
out.append("static const struct acl_sub subs[] = {")
for name, m in subs:
    out.append('    { "%s", %s },' % (name, m))
out.append("};")
print("\n".join(out))
