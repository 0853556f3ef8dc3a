"""Two `hmg serve` nodes over one remote SPARQL store, written at once.

Usage: remote_nodes.py SECONDS URL_A TOKEN_A URL_B TOKEN_B SPARQL_URL TENANT_GRAPH

For SECONDS, 4 writers on each node write into one tenant through GraphQL:
memorize (English, Chinese, Japanese), correct replace of their own atoms,
replace of a few *shared* atoms that writers on both nodes race for, and
govern quarantine. Then, with SPARQLWrapper straight against the store:
every acknowledged write is there, each evolution chain has at most one
active atom, and a recall on each node finds the other node's writes
(immediately: a recall catches its node up with the store first) and
lists them among the newest atoms.
Prints one JSON line of figures. Run by tests/integration/remote.rs.
"""

import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request

from SPARQLWrapper import JSON, SPARQLWrapper

SECONDS = float(sys.argv[1])
NODES = {"A": (sys.argv[2], sys.argv[3]), "B": (sys.argv[4], sys.argv[5])}
SPARQL_URL, GRAPH = sys.argv[6], sys.argv[7]
WRITERS_PER_NODE = 4


def check(condition, step, detail=None):
    if not condition:
        raise AssertionError(f"{step}: {json.dumps(detail, ensure_ascii=False, default=str)[:3000]}")


def gql(node, query, variables=None):
    url, token = NODES[node]
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(url + "/graphql", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


MEMORIZE = "mutation($c: String!) { memorize(content: $c, source: \"user\") { effect atomId } }"
REPLACE = "mutation($t: String!, $c: String!) { correct(targetAtom: $t, action: \"replace\", reason: \"changed\", newContent: $c) { effect newAtomId } }"
QUARANTINE = "mutation($t: String!) { govern(targetAtom: $t, action: \"quarantine\", reason: \"review\") { effect } }"
RECALL = "query($q: String!) { recall(query: $q, maxResults: 10) { atomId content } }"
NEWEST = "{ atoms(first: 3) { nodes { atomId } } }"

lock = threading.Lock()
acknowledged = []  # (atom id, node)
replaced = []  # (old, new)
errors = []  # unexpected failures
refused = {"conflict": 0, "unavailable": 0}
samples = []  # the first few refusals, for the report
counts = {"memorize": 0, "replace": 0, "shared_replace": 0, "quarantine": 0}

TEXTS = [
    "Node {n} writer {w} note {i}: the payments service deploys with Helm {i}",
    "节点{n}写入者{w}第{i}条：数据库每周五{i}点备份",
    "ノード{n}の書き手{w}、メモ{i}：ステージングは毎朝{i}時に更新される",
]


def outcome(node, query, variables, field):
    """(data, refusal kind or None); unexpected errors are recorded."""
    status, answer = gql(node, query, variables)
    if status == 200 and not answer.get("errors"):
        return answer["data"][field], None
    text = json.dumps(answer, ensure_ascii=False)
    codes = {e.get("extensions", {}).get("code") for e in answer.get("errors", [])}
    if status == 503 or "UNAVAILABLE" in codes or "lost the race" in text:
        with lock:
            if len(samples) < 3:
                samples.append(text[:300])
        return None, "unavailable"
    if "CONFLICT" in codes or "changed while" in text or "superseded" in text or "not active" in text or "status" in text:
        return None, "conflict"
    with lock:
        errors.append({"node": node, "status": status, "answer": answer, "variables": variables})
    return None, "error"


def writer(node, index, shared, deadline):
    rng = random.Random(f"{node}{index}")
    own = []
    i = 0
    while time.time() < deadline:
        i += 1
        op = rng.random()
        if op < 0.6 or not own:
            content = rng.choice(TEXTS).format(n=node, w=index, i=i)
            data, refusal = outcome(node, MEMORIZE, {"c": content}, "memorize")
            if data and data["effect"] == "applied":
                with lock:
                    acknowledged.append((data["atomId"], node, content))
                    counts["memorize"] += 1
                own.append(data["atomId"])
        elif op < 0.9:
            mine = op < 0.8
            target = own.pop(rng.randrange(len(own))) if mine else rng.choice(shared)
            text = f"Node {node} writer {index} revised note {i}" if mine else f"Shared fact revised by node {node} writer {index} at {i}"
            data, refusal = outcome(node, REPLACE, {"t": target, "c": text}, "correct")
            if data and data["effect"] == "applied":
                with lock:
                    replaced.append((target, data["newAtomId"]))
                    acknowledged.append((data["newAtomId"], node, None))
                    counts["replace" if mine else "shared_replace"] += 1
                if mine:
                    own.append(data["newAtomId"])
        else:
            target = own.pop(rng.randrange(len(own)))
            data, refusal = outcome(node, QUARANTINE, {"t": target}, "govern")
            if data and data["effect"] == "applied":
                with lock:
                    counts["quarantine"] += 1
        if refusal in refused:
            with lock:
                refused[refusal] += 1


def sparql(query):
    client = SPARQLWrapper(SPARQL_URL)
    client.setQuery(query)
    client.setReturnFormat(JSON)
    client.setMethod("POST")
    return client.query().convert()["results"]["bindings"]


def main():
    shared = []
    for k in range(6):
        data, _ = outcome("A", MEMORIZE, {"c": f"Shared fact {k}: the team standup is at {9 + k} o'clock"}, "memorize")
        check(data and data["effect"] == "applied", "seed shared atoms", data)
        shared.append(data["atomId"])
    deadline = time.time() + SECONDS
    started = time.time()
    threads = [threading.Thread(target=writer, args=(node, w, shared, deadline)) for node in NODES for w in range(WRITERS_PER_NODE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - started
    check(not errors, "no unexpected error", errors[:5])
    check(counts["memorize"] >= max(20, SECONDS), "enough writes went through", counts)

    # Every acknowledged write is in the store.
    rows = sparql(f"PREFIX hmg: <https://w3id.org/hmg/ns#> SELECT ?atom ?status WHERE {{ GRAPH <{GRAPH}> {{ ?atom hmg:status ?status }} }}")
    status = {r["atom"]["value"].removeprefix("urn:hmg:atom:"): r["status"]["value"] for r in rows}
    missing = [a for a, _, _ in acknowledged if a not in status]
    check(not missing, "every acknowledged write is in the store", missing[:10])

    # Each evolution chain has at most one active atom.
    edges = sparql(f"PREFIX prov: <http://www.w3.org/ns/prov#> SELECT ?new ?old WHERE {{ GRAPH <{GRAPH}> {{ ?new prov:wasRevisionOf ?old }} }}")
    parent = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for e in edges:
        a, b = find(e["new"]["value"]), find(e["old"]["value"])
        if a != b:
            parent[a] = b
    chains = {}
    for atom, s in status.items():
        if s == "active":
            root = find("urn:hmg:atom:" + atom)
            chains.setdefault(root, []).append(atom)
    forked = {root: atoms for root, atoms in chains.items() if len(atoms) > 1}
    check(not forked, "at most one active atom per evolution chain", forked)
    for old, _ in replaced:
        check(status.get(old) != "active", "a replaced atom is not active", old)

    # A recall on each node finds the other node's writes, at once.
    lags = []
    for writer_node, reader in (("A", "B"), ("B", "A")):
        for k in range(10):
            content = f"Cross-node probe {k} from {writer_node}: the canary runs in region {writer_node}{k}"
            # A refusal that says "nothing was written, retry" is retried,
            # as a client would (a loaded machine can still be settling the
            # writers' race of the phase above).
            for attempt in range(5):
                data, refusal = outcome(writer_node, MEMORIZE, {"c": content}, "memorize")
                if refusal != "unavailable":
                    break
                time.sleep(0.2 * (attempt + 1))
            check(data and data["effect"] == "applied", "probe write", {"data": data, "refusal": refusal, "samples": samples, "errors": errors[-3:]})
            written = time.time()
            hits, _ = outcome(reader, RECALL, {"q": content}, "recall")
            lags.append(time.time() - written)
            check(hits is not None and data["atomId"] in [h["atomId"] for h in hits], f"node {reader} recalls node {writer_node}'s write", hits)
            # A listing too: a node keeps its tenants' atom lists between
            # writes and must read them again after another node's.
            listed, _ = outcome(reader, NEWEST, {}, "atoms")
            check(listed is not None and data["atomId"] in [n["atomId"] for n in listed["nodes"]], f"node {reader} lists node {writer_node}'s write", listed)
    for atom, node, content in random.Random(1).sample([a for a in acknowledged if a[2]], 10):
        other = "B" if node == "A" else "A"
        hits, _ = outcome(other, RECALL, {"q": content}, "recall")
        active = status.get(atom) == "active"
        if active:
            check(hits is not None and atom in [h["atomId"] for h in hits], f"node {other} recalls {atom}", hits)

    lags.sort()
    print(json.dumps({
        "seconds": round(elapsed, 1),
        "writes": counts,
        "acknowledged": len(acknowledged),
        "writes_per_second": round(len(acknowledged) / elapsed, 1),
        "refused": refused,
        "refusal_samples": samples,
        "chains_with_revisions": len({find(e["old"]["value"]) for e in edges}),
        "cross_node_recall_p50_ms": round(lags[len(lags) // 2] * 1000, 1),
        "cross_node_recall_max_ms": round(lags[-1] * 1000, 1),
    }))


main()
