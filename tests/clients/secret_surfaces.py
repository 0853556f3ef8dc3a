"""Writes every secret of the corpus through every write surface of a real
`hmg serve`: MCP (memorize content and source, handoff, correct replace and
its reason, govern derive_lesson and its reason), GraphQL mutations
(memorize with source, handoff, correct, govern), REST add (with
extraction) and PUT. The caller then stops the server and searches the
store's files, quads and index terms for every value.

Usage: secret_surfaces.py URL CORPUS_TSV [CORPUS_TSV …]
Prints "surfaces ok: N writes" at the end.
"""

import asyncio
import json
import sys
import urllib.error
import urllib.request

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

URL = sys.argv[1]
CORPUS = []
for path in sys.argv[2:]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            secret, text = line.rstrip("\n").split("\t")[:2]
            CORPUS.append((secret, text.replace("\\n", "\n")))
WRITES = 0


def source_of(prefix, text):
    """An attribution holding the text when it fits the 200-character limit
    (cutting a secret in half would test the cut, not the redaction)."""
    source = f"{prefix} {text}".replace("\n", " ")
    return source if len(source) <= 200 else f"{prefix} (long)"


def check(condition, step, detail=None):
    if not condition:
        raise AssertionError(f"{step}: {json.dumps(detail, ensure_ascii=False, default=str)[:2000]}")


def post(path, body, method="POST"):
    global WRITES
    request = urllib.request.Request(URL + path, data=json.dumps(body).encode(), method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            WRITES += 1
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def gql(query, variables):
    status, answer = post("/graphql", {"query": query, "variables": variables})
    check(status == 200 and not answer.get("errors"), "graphql", answer)
    return answer["data"]


async def mcp_writes():
    global WRITES
    async with streamable_http_client(URL + "/mcp") as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()

            async def call(tool, arguments):
                global WRITES
                result = await session.call_tool(tool, arguments)
                WRITES += 1
                return result.structured_content or {}

            for n, (secret, text) in enumerate(CORPUS):
                memorized = await call("memory_memorize", {"content": f"MCP note {n}: {text}", "source": source_of("ops", text)})
                atom = memorized.get("atom_id") or memorized.get("deduped_with")
                await call("memory_handoff", {"summary": f"Handoff {n}: rotated credentials; {text}"})
                if atom and memorized.get("effect") == "applied":
                    replaced = await call("memory_correct", {"target_atom": atom, "action": "replace", "reason": f"typo, was {text}", "new_content": f"MCP note {n} corrected: {text}"})
                    head = replaced.get("new_atom_id") or atom
                    await call("memory_govern", {"target_atom": head, "action": "derive_lesson", "reason": f"lesson from {text}", "lesson_content": f"Lesson {n}: never paste {text}"})


def graphql_and_rest_writes():
    for n, (secret, text) in enumerate(CORPUS):
        data = gql("mutation($c: String!, $s: String) { memorize(content: $c, source: $s) { effect atomId dedupedWith } }", {"c": f"GraphQL note {n}: {text}", "s": source_of("gql", text)})
        atom = data["memorize"]["atomId"]
        gql("mutation($s: String!) { handoff(summary: $s) { effect } }", {"s": f"GraphQL handoff {n}: {text}"})
        if atom and data["memorize"]["effect"] == "applied":
            out = gql("mutation($a: String!, $r: String!, $c: String) { correct(targetAtom: $a, action: \"replace\", reason: $r, newContent: $c) { newAtomId } }", {"a": atom, "r": f"fix {text}", "c": f"GraphQL note {n} fixed: {text}"})
            head = out["correct"]["newAtomId"] or atom
            gql("mutation($a: String!, $r: String!, $l: String) { govern(targetAtom: $a, action: \"derive_lesson\", reason: $r, lessonContent: $l) { lessonAtomId } }", {"a": head, "r": f"learned {text}", "l": f"GraphQL lesson {n}: {text}"})
        status, answer = post("/api/v1/hetamem/vg/add", {"messages": [{"role": "user", "content": f"Hi! My deploy note {n}: {text}"}, {"role": "assistant", "content": f"Noted {text}"}], "user_id": "secrets", "agent_id": "rest"})
        check(status == 200, "REST add", answer)
        ids = [r["id"] for r in answer.get("results", []) if r.get("event") in ("ADD", "UPDATE")]
        if ids:
            status, answer = post(f"/api/v1/hetamem/vg/{ids[0]}", {"data": f"REST update {n}: {text}"}, method="PUT")
            check(status == 200, "REST PUT", answer)
        raw_status, raw = post("/api/v1/hetamem/vg/add", {"messages": [{"role": "user", "content": f"raw {n}: {text}"}], "user_id": "secrets", "agent_id": "raw", "infer": False})
        check(raw_status == 200, "REST add infer=false", raw)
    # The entity list never shows a value.
    entities = gql("{ entities(first: 500) { name } }", {})["entities"]
    names = " ".join(e["name"] for e in entities)
    leaked = [s for s, _ in CORPUS if s in names]
    check(not leaked, "entities hold no secret", leaked[:5])


asyncio.run(mcp_writes())
graphql_and_rest_writes()
print(f"surfaces ok: {WRITES} writes, {len(CORPUS)} secrets")
