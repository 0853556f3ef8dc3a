#!/usr/bin/env python3
"""`memory_memorize` bursts over MCP stdio, raw JSON-RPC: a fresh `hmg mcp` on a
fresh store; N distinct memories (English, Chinese, Japanese) one call at a
time, then N more pipelined (all sent, then all answers read), as an agent's
parallel tool calls or a client's burst arrive.

    python3 benches/mcp_burst.py "$CARGO_TARGET_DIR/release/hmg" [N=300]

Prints memories per second for both. Set HMG_LOG to read the server's log in $TMPDIR/hmg-mcp-burst.err.
Python 3 standard library only.
"""
import json, os, subprocess, sys, tempfile, time
hmg = sys.argv[1]; n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
store = tempfile.mkdtemp(prefix="burst")
p = subprocess.Popen([hmg, "--store", store, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(tempfile.gettempdir(), "hmg-mcp-burst.err"), "w"), env=dict(os.environ), cwd=store)
i = 0
def send(method, params=None, notify=False):
    global i
    msg = {"jsonrpc": "2.0", "method": method}
    if params is not None: msg["params"] = params
    if not notify: i += 1; msg["id"] = i
    p.stdin.write((json.dumps(msg) + "\n").encode()); p.stdin.flush()
    return i
def read_until(ids):
    ids = set(ids); out = {}
    while ids:
        r = json.loads(p.stdout.readline())
        if r.get("id") in ids: ids.discard(r["id"]); out[r["id"]] = r
    return out
read_until([send("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}})])
send("notifications/initialized", notify=True)
S = ["Li Wei fixed the {x} flaky test in build {i}.", "我们在第{i}次迭代把{x}服务迁移到了新集群。", "{x}のリリース{i}は金曜日に出ました。", "Sofia prefers {x} for the dashboard {i}."]
X = ["payments", "billing", "search", "auth", "mobile", "gateway"]
def text(k): return S[k % 4].format(i=k, x=X[k % 6])
read_until([send("tools/call", {"name": "memory_memorize", "arguments": {"content": "warm up " + text(0)}})])
t = time.perf_counter()
for k in range(n):
    r = read_until([send("tools/call", {"name": "memory_memorize", "arguments": {"content": text(1000 + k)}})])
seq = time.perf_counter() - t
t = time.perf_counter()
ids = [send("tools/call", {"name": "memory_memorize", "arguments": {"content": text(5000 + k)}}) for k in range(n)]
out = read_until(ids)
burst = time.perf_counter() - t
bad = [r for r in out.values() if "error" in r or r["result"].get("isError")]
applied = sum(1 for r in out.values() if '"applied"' in json.dumps(r))
print(f"sequential: {n/seq:.0f}/s   pipelined burst: {n/burst:.0f}/s (applied {applied}, errors {len(bad)})")
p.stdin.close(); p.wait()
