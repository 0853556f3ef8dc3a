#!/usr/bin/env python3
"""Does a SPARQL 1.1 store isolate concurrent guarded updates?

HMG commits with one `DELETE {...} INSERT {...} WHERE {guard}` operation per
write. On a store that isolates concurrent updates, of two writers that read
the same state only one guard passes; on one that does not (Virtuoso 7), both
do and HMG nodes need a writer node (README, "Scaling out").

This script races 8 writers, 15 guarded increments each, on a counter in a
scratch graph (<urn:hmg:isolation-check>, dropped first and at the end), and
reports how many acknowledged increments were lost and how many forks
appeared. Standard library only.

Usage: sparql-isolation-check.py UPDATE_URL [USER PASSWORD]
Exit 0: isolated (no fork); 1: not isolated (use a writer node).
"""

import json
import sys
import threading
import urllib.parse
import urllib.request
import uuid

URL = sys.argv[1]
USER, PASSWORD = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else (None, None)
GRAPH = "<urn:hmg:isolation-check>"
WRITERS, ROUNDS = 8, 15


def opener():
    handlers = []
    if USER:
        manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        manager.add_password(None, URL, USER, PASSWORD)
        handlers = [urllib.request.HTTPDigestAuthHandler(manager), urllib.request.HTTPBasicAuthHandler(manager)]
    return urllib.request.build_opener(*handlers)


def post(field, text):
    data = urllib.parse.urlencode({field: text}).encode()
    request = urllib.request.Request(URL, data=data, headers={"Accept": "application/sparql-results+json"})
    return opener().open(request, timeout=60).read()


def select(text):
    return json.loads(post("query", text))


post("update", f"DROP SILENT GRAPH {GRAPH}")
post("update", f"INSERT DATA {{ GRAPH {GRAPH} {{ <urn:c> <urn:v> 0 . <urn:c> <urn:head> <urn:e:0> }} }}")
acknowledged = []
lock = threading.Lock()


def writer():
    for _ in range(ROUNDS):
        while True:
            row = select(f"SELECT ?v ?h WHERE {{ GRAPH {GRAPH} {{ <urn:c> <urn:v> ?v . <urn:c> <urn:head> ?h }} }}")["results"]["bindings"][0]
            value, head, entry = int(row["v"]["value"]), row["h"]["value"], f"urn:e:{uuid.uuid4()}"
            post("update", f"DELETE {{ GRAPH {GRAPH} {{ <urn:c> <urn:v> {value} . <urn:c> <urn:head> <{head}> }} }} "
                           f"INSERT {{ GRAPH {GRAPH} {{ <urn:c> <urn:v> {value + 1} . <urn:c> <urn:head> <{entry}> . <{entry}> <urn:prev> <{head}> }} }} "
                           f"WHERE {{ GRAPH {GRAPH} {{ <urn:c> <urn:v> {value} . <urn:c> <urn:head> <{head}> }} }}")
            if select(f"ASK {{ GRAPH {GRAPH} {{ <{entry}> <urn:prev> ?p }} }}")["boolean"]:
                with lock:
                    acknowledged.append(entry)
                break


threads = [threading.Thread(target=writer) for _ in range(WRITERS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
values = [int(r["v"]["value"]) for r in select(f"SELECT ?v WHERE {{ GRAPH {GRAPH} {{ <urn:c> <urn:v> ?v }} }}")["results"]["bindings"]]
heads = len(select(f"SELECT ?h WHERE {{ GRAPH {GRAPH} {{ <urn:c> <urn:head> ?h }} }}")["results"]["bindings"])
forks = len(select(f"SELECT ?p WHERE {{ GRAPH {GRAPH} {{ ?e <urn:prev> ?p }} }} GROUP BY ?p HAVING (COUNT(?e) > 1)")["results"]["bindings"])
post("update", f"DROP SILENT GRAPH {GRAPH}")
isolated = forks == 0 and heads == 1 and values == [len(acknowledged)]
print(json.dumps({"acknowledged": len(acknowledged), "counter": values, "heads": heads, "forks": forks, "isolated": isolated}))
sys.exit(0 if isolated else 1)
