#!/usr/bin/env python3
"""REST `add` throughput, the way a mem0-style client takes it: `hmg serve` on a
fresh store, then ADDS chats of MSGS user messages each (English, Chinese,
Japanese; half of them name no number, so the merge asks the sentence model),
with inference (extraction + merge) and with `infer: false`.

    python3 benches/rest_add.py "$CARGO_TARGET_DIR/release/hmg" [ADDS=20] [MSGS=10] [true|false|both] [PRELOAD=0]

PRELOAD memories (50 per `infer: false` add, not timed) go into the same
user first: a long-time user's store. Prints memories added per second
and the per-add latency. WRAP="perf record
-g --" runs the server under a profiler. Python 3 standard library only.
"""
import json, os, socket, subprocess, sys, tempfile, time, urllib.request, statistics, random
hmg = sys.argv[1]; adds = int(sys.argv[2]) if len(sys.argv) > 2 else 20; per = int(sys.argv[3]) if len(sys.argv) > 3 else 10
modes = sys.argv[4] if len(sys.argv) > 4 else "both"
preload = int(sys.argv[5]) if len(sys.argv) > 5 else 0
rnd = random.Random(7)
EN = ["I bought a {c} bike for the {n} race.", "My friend {p} recommended the book {t} {n}.", "I visited {city} in {m} for workshop {n}.",
      "I'm allergic to {a}.", "We adopted a {c} cat named {p} number {n}.", "I finished reading {t} volume {n} last week.",
      "My team ships release {n} of the {t} app on Friday.", "I run {n} kilometres every Sunday with {p}."]
ZH = ["我在{city}参加了第{n}次研讨会。", "我的朋友{p}推荐了第{n}本书。", "我们买了一辆{c}色的自行车，编号{n}。", "我每周日和{p}跑{n}公里。"]
JA = ["{city}で第{n}回のワークショップに参加しました。", "友達の{p}が{n}冊目の本を勧めてくれました。", "毎週日曜日に{p}と{n}キロ走ります。"]
W = dict(c=["red", "blue", "green", "black"], p=["Ana", "Kenji", "Li Wei", "Priya", "Mateo", "Sofia"], t=["Dune", "Rust", "Atlas", "Nova"],
         city=["Porto", "Kyoto", "Berlin", "Lima"], m=["March", "May", "June"], a=["peanuts", "pollen", "shellfish", "latex"])
PLAIN = ["I want to learn {x} with {p} someday.", "My neighbour {p} grows {x} on the {y}.", "I keep my {x} next to the {y}.",
         "我想和{p}一起学{x}。", "{p}さんは{y}で{x}を育てています。"]
X = ["pottery", "sourdough", "tomatoes", "basil", "chess", "salsa", "origami", "kayaking", "calligraphy", "ukulele", "watercolours", "bonsai"]
Y = ["balcony", "roof", "porch", "desk", "shelf", "window", "garage", "attic"]
P2 = ["Ana", "Kenji", "Li Wei", "Priya", "Mateo", "Sofia", "Tom", "Yuki", "Chen", "Omar", "Lena", "Ravi"]
def fact(i):
    if i % 2:
        return rnd.choice(PLAIN).format(x=rnd.choice(X), y=rnd.choice(Y), p=rnd.choice(P2))
    lang = rnd.choice([EN, EN, ZH, JA]); t = rnd.choice(lang)
    return t.format(n=i, **{k: rnd.choice(v) for k, v in W.items()})
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def cpu(pid):
    """Seconds of CPU the process (every thread) has used; under WRAP, the
    wrapper's children are not counted, so 0."""
    try: f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError: return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def run(infer):
    store = tempfile.mkdtemp(prefix="addb"); p = port()
    proc = subprocess.Popen(os.environ.get("WRAP", "").split() + [hmg, "--store", store, "serve", "--listen", f"127.0.0.1:{p}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{p}/api/v1/hetamem/vg"
    for _ in range(600):
        try: urllib.request.urlopen(f"http://127.0.0.1:{p}/healthz", timeout=1); break
        except Exception: time.sleep(0.1)
    def add(msgs):
        body = json.dumps({"messages": msgs, "user_id": "u1", "agent_id": "bench", "infer": infer}).encode()
        r = urllib.request.Request(base + "/add", data=body, method="POST", headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(r, timeout=300).read())
    add([{"role": "user", "content": "I like green tea warmup."}])
    for start in range(0, preload, 50):
        body = json.dumps({"messages": [{"role": "user", "content": f"Older note {i}: {fact(i)}"} for i in range(start, min(start + 50, preload))],
                           "user_id": "u1", "agent_id": "bench", "infer": False}).encode()
        urllib.request.urlopen(urllib.request.Request(base + "/add", data=body, method="POST", headers={"Content-Type": "application/json"}), timeout=300).read()
    times, n_added, k, ev = [], 0, 0, {}
    cpu0 = cpu(proc.pid)
    t0 = time.perf_counter()
    for a in range(adds):
        msgs = [{"role": "user", "content": fact(1000 + k + j)} for j in range(per)]; k += per
        t = time.perf_counter(); r = add(msgs); times.append(time.perf_counter() - t)
        n_added += sum(1 for x in r["results"] if x["event"] == "ADD")
        for x in r["results"]: ev[x["event"]] = ev.get(x["event"], 0) + 1
    total = time.perf_counter() - t0
    used = cpu(proc.pid) - cpu0
    proc.send_signal(2); proc.wait()
    print(f"infer={infer}{f' after {preload} memories' if preload else ''}: {adds} adds x {per} msgs: {n_added} ADD in {total:.2f} s = {n_added/total:.0f} memories/s; per add p50 {statistics.median(times)*1e3:.0f} ms max {max(times)*1e3:.0f} ms {ev}; server CPU {used/adds*1e3:.0f} ms per add, {used/total:.2f} cores busy")
for infer in ([True, False] if modes == "both" else [modes == "true"]):
    run(infer)
