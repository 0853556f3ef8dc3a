"""HTTP surfaces of `hmg serve` with real clients: tenant isolation across MCP
(official Python SDK), GraphQL, SPARQL (SPARQLWrapper), the REST API and
reflect, authentication,
the ready audit queries of queries/audit/, and malformed or oversized input.

Usage: http_surfaces.py URL ALICE_TOKEN ALICE_READ_TOKEN BOB_TOKEN QUERIES_DIR

Run by tests/integration/http.rs, which starts the server with those tokens.
"""

import asyncio
import json
import pathlib
import sys
import urllib.error
import urllib.request

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from SPARQLWrapper import JSON, SPARQLWrapper

URL, ALICE, ALICE_READ, BOB, QUERIES = sys.argv[1:6]


def check(condition, step, detail=None):
    if not condition:
        raise AssertionError(f"{step}: {json.dumps(detail, ensure_ascii=False, default=str)[:3000]}")


def http(method, path, body=None, token=None, headers=None):
    request = urllib.request.Request(URL + path, data=body, method=method)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def http_upload(method, path, body, token, headers):
    """Like http(), but reads the answer even when the server refuses an
    oversized body before the client has finished sending it (a 413 sent
    early closes the connection under the writer: EPIPE on the client)."""
    import http.client
    import urllib.parse
    parsed = urllib.parse.urlsplit(URL)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    connection.putrequest(method, path)
    for name, value in headers.items():
        connection.putheader(name, value)
    connection.putheader("Authorization", f"Bearer {token}")
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders()
    try:
        connection.send(body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def gql(query, token, variables=None):
    status, _, body = http("POST", "/graphql", json.dumps({"query": query, "variables": variables or {}}).encode(), token, {"Content-Type": "application/json"})
    return status, json.loads(body)


def gql_ok(query, token, step, variables=None):
    status, answer = gql(query, token, variables)
    check(status == 200 and not answer.get("errors"), step, answer)
    return answer["data"]


def rest(method, path, token, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    status, _, answer = http(method, "/api/v1/hetamem/vg" + path, data, token, headers)
    return status, json.loads(answer) if answer else None


def sparql_rows(query, token):
    client = SPARQLWrapper(URL + "/sparql")
    client.setQuery(query)
    client.setReturnFormat(JSON)
    client.addCustomHttpHeader("Authorization", f"Bearer {token}")
    return client.queryAndConvert()["results"]["bindings"]


async def mcp_session(token, work):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client:
        async with streamable_http_client(URL + "/mcp", http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                return await work(session)


async def main():
    # --- seed: Bob through MCP, Alice through GraphQL -----------------------------------
    async def bob_writes(session):
        result = await session.call_tool("memory_memorize", {"content": "Bob's Redis cluster password rotation happens every Friday", "source": "user"})
        check(not result.is_error, "bob memorize", result.content)
        return result.structured_content["atom_id"]

    bob_atom = await mcp_session(BOB, bob_writes)
    m = gql_ok('mutation { a: memorize(content: "Alice deploys the payments service with Helm 3", source: "user") { effect atomId } '
               'b: memorize(content: "Alice keeps staging on Kubernetes 1.29", source: "user") { effect atomId } '
               'c: memorize(content: "Alice stored the Stripe key in the wiki once", source: "user") { effect atomId } }', ALICE, "alice seed")
    helm, k8s, stripe = m["a"]["atomId"], m["b"]["atomId"], m["c"]["atomId"]
    gql_ok('mutation($t: String!) { correct(targetAtom: $t, action: "replace", reason: "upgraded", newContent: "Alice deploys the payments service with Helm 3.14") { effect newAtomId } }', ALICE, "replace", {"t": helm})
    gql_ok('mutation($t: String!) { correct(targetAtom: $t, action: "negate", reason: "staging moved to Nomad") { effect } }', ALICE, "negate", {"t": k8s})
    gql_ok('mutation($t: String!) { govern(targetAtom: $t, action: "derive_lesson", reason: "secret in memory", lessonContent: "Keep API keys in the secret manager, never in notes") { effect lessonAtomId } }', ALICE, "lesson", {"t": stripe})

    # --- tenant isolation: Alice tries to reach Bob's atom on every surface ----------------
    async def alice_attacks(session):
        hits = await session.call_tool("memory_recall", {"query": "Redis cluster password rotation"})
        check(not hits.is_error and all(a["atom_id"] != bob_atom for a in hits.structured_content["atoms"]), "mcp recall stays in tenant", hits.structured_content)
        for tool, args in [
            ("memory_correct", {"target_atom": bob_atom, "action": "negate", "reason": "attack"}),
            ("memory_correct", {"target_atom": bob_atom, "action": "replace", "reason": "attack", "new_content": "owned"}),
            ("memory_govern", {"target_atom": bob_atom, "action": "tombstone", "reason": "attack"}),
            ("memory_govern", {"target_atom": bob_atom, "action": "quarantine", "reason": "attack"}),
        ]:
            result = await session.call_tool(tool, args)
            check(result.is_error and "unknown atom" in result.content[0].text, f"mcp {tool} on another tenant's atom", result.content)
        forged = await session.call_tool("memory_memorize", {"content": "Forged into Bob's tenant", "scope": {"tenant_id": "bob"}})
        check(not forged.is_error, "forged scope call", forged.content)
        return forged.structured_content["atom_id"]

    forged_atom = await mcp_session(ALICE, alice_attacks)
    status, answer = gql('query($id: String!) { atom(id: $id) { head } }', ALICE, {"id": bob_atom})
    check(answer["errors"][0]["extensions"]["code"] == "NOT_FOUND", "graphql atom by id", answer)
    data = gql_ok('{ atoms(first: 200) { nodes { atomId content } } recall(query: "Redis password rotation") { atomId } entities { name } scopes { repository } }', ALICE, "graphql lists")
    check(all(n["atomId"] != bob_atom and "Redis" not in n["content"] for n in data["atoms"]["nodes"]), "graphql atoms stay in tenant", data)
    check(all(h["atomId"] != bob_atom for h in data["recall"]), "graphql recall stays in tenant", data)
    check(all(e["name"] != "Redis" for e in data["entities"]), "graphql entities stay in tenant", data)
    # Filters of closed sets are checked: a known value narrows, an unknown one names the field.
    data = gql_ok('{ atoms(first: 200, filter: {status: "active", kind: "fact"}) { nodes { status kind } } }', ALICE, "graphql enum filter")
    check(data["atoms"]["nodes"] and all(n["status"] == "active" and n["kind"] == "fact" for n in data["atoms"]["nodes"]), "graphql filter narrows", data)
    status, answer = gql('{ atoms(filter: {status: "deleted"}) { totalCount } }', ALICE)
    error = (answer.get("errors") or [{}])[0]
    check(error.get("extensions", {}).get("code") == "BAD_USER_INPUT" and error["extensions"].get("field") == "filter.status" and "negated" in error.get("message", ""), "graphql unknown filter value", answer)
    for mutation in ['correct(targetAtom: $id, action: "negate", reason: "x") { effect }', 'govern(targetAtom: $id, action: "tombstone", reason: "x") { effect }']:
        status, answer = gql(f"mutation($id: String!) {{ {mutation} }}", ALICE, {"id": bob_atom})
        check(answer.get("errors") and answer["errors"][0]["extensions"]["code"] in ("NOT_FOUND", "BAD_USER_INPUT"), f"graphql {mutation}", answer)
    bob_graph = "<urn:hmg:tenant:bob>"
    for query in [
        "SELECT ?c WHERE { ?a <https://w3id.org/hmg/ns#content> ?c }",
        f"SELECT ?c FROM {bob_graph} WHERE {{ ?a <https://w3id.org/hmg/ns#content> ?c }}",
        f"SELECT ?c FROM NAMED {bob_graph} WHERE {{ GRAPH ?g {{ ?a <https://w3id.org/hmg/ns#content> ?c }} }}",
        f"SELECT ?c WHERE {{ GRAPH {bob_graph} {{ ?a <https://w3id.org/hmg/ns#content> ?c }} }}",
        "SELECT ?c WHERE { GRAPH ?g { ?a <https://w3id.org/hmg/ns#content> ?c } }",
        f"SELECT ?c WHERE {{ <urn:hmg:atom:{bob_atom}> ?p ?c }}",
    ]:
        rows = sparql_rows(query, ALICE)
        check(all("Redis" not in r["c"]["value"] for r in rows), f"sparql stays in tenant: {query}", rows)
    # REST: Bob's memory, by id and by Bob's own user_id/agent_id, is out of Alice's reach.
    status, added = rest("POST", "/add", BOB, {"messages": [{"role": "user", "content": "I keep the Redis failover runbook in Notion."}], "user_id": "bob", "agent_id": "ops"})
    check(status == 200 and added["results"][0]["event"] == "ADD", "bob adds through REST", added)
    bob_memory = added["results"][0]["id"]
    for method, path, body in [
        ("GET", f"/{bob_memory}", None),
        ("GET", f"/{bob_memory}/history", None),
        ("PUT", f"/{bob_memory}", {"data": "owned"}),
        ("DELETE", f"/{bob_memory}", None),
        ("DELETE", f"/{bob_memory}?purge=true", None),
    ]:
        status, answer = rest(method, path, ALICE, body)
        check(status == 404, f"rest {method} {path} on another tenant's memory", [status, answer])
    status, answer = rest("POST", "/search", ALICE, {"query": "Redis failover runbook", "user_id": "bob", "agent_id": "ops"})
    check(status == 200 and answer["results"] == [], "rest search stays in tenant", answer)
    status, answer = rest("GET", "?user_id=bob&agent_id=ops", ALICE)
    check(status == 200 and answer["results"] == [], "rest list stays in tenant", answer)
    status, answer = rest("DELETE", "?user_id=bob&agent_id=ops", ALICE)
    check(status == 200 and answer["deleted"] == 0, "rest delete-all stays in tenant", answer)
    status, answer = rest("GET", "?user_id=bob", None)
    check(status == 401, "rest needs a token", [status, answer])
    status, answer = rest("POST", "/add", ALICE_READ, {"messages": [{"role": "user", "content": "I like tea."}], "user_id": "alice"})
    check(status == 403 and "memory:write" in answer["detail"], "rest add with a read-only token", [status, answer])
    status, answer = rest("POST", "/search", ALICE_READ, {"query": "payments", "user_id": "alice"})
    check(status == 200, "rest search with a read-only token", [status, answer])

    # reflect: a dry run is a read, a real run a write; Alice's run stays in her tenant.
    reflect = 'mutation($input: ReflectInput) { reflect(input: $input) { dryRun actions counts { summarized promoted expired decayed archived } auditRecordIds } }'
    later = {"until": "2031-01-01T00:00:00Z", "actionsCsv": "decay,archive"}
    data = gql_ok(reflect, ALICE_READ, "reflect dry run with a read-only token", {"input": dict(later, dryRun=True)})
    check(data["reflect"]["dryRun"] and data["reflect"]["auditRecordIds"] == [] and data["reflect"]["counts"]["decayed"] == 2, "reflect dry run counts (two active facts; lessons never decay)", data)
    status, answer = gql(reflect, ALICE_READ, {"input": later})
    check(status == 403 and answer["errors"][0]["extensions"]["code"] == "FORBIDDEN", "reflect writes need memory:write", [status, answer])
    status, answer = gql(reflect, ALICE, {"input": dict(later, ownerFilter="bob")})
    check(status == 403 and "owner_filter" in answer["errors"][0]["message"], "reflect cannot widen to another owner", [status, answer])
    status, answer = gql(reflect, ALICE, {"input": {"since": "last week"}})
    check(answer["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT" and answer["errors"][0]["extensions"]["field"] == "since", "reflect rejects a malformed since", answer)
    dry_counts = data["reflect"]["counts"]
    data = gql_ok(reflect, ALICE, "reflect real run", {"input": later})
    check(data["reflect"]["counts"] == dry_counts, "the real run does what the dry run planned", [dry_counts, data])
    check(len(data["reflect"]["auditRecordIds"]) == sum(data["reflect"]["counts"].values()) > 0, "one audit entry per decision", data)

    async def read_only_reflect(session):
        result = await session.call_tool("reflect", {"dry_run": True, "actions_csv": "summary,expiry"})
        text = result.content[0].text
        check(not result.is_error and text.startswith("### Memory Reflect Report"), "mcp reflect text", text)
        for part in ["Dry Run: true", "Actions: summarize, expire", "Summarized:", "Promoted:", "Expired:", "Decayed:", "Archived:", "Audit Records: 0"]:
            check(part in text, f"mcp reflect report shows {part}", text)
        check(result.structured_content["counts"]["expired"] == 0, "structured report", result.structured_content)
        result = await session.call_tool("reflect", {"dry_run": False})
        check(result.is_error and "memory:write" in result.content[0].text, "mcp reflect write with a read-only token", result.content)
        result = await session.call_tool("reflect", {"dry_run": True, "time_window_hours": -1})
        check(result.is_error and "time_window_hours" in result.content[0].text, "mcp reflect validation", result.content)

    await mcp_session(ALICE_READ, read_only_reflect)
    status, answer = rest("GET", f"/{bob_memory}/history", BOB)
    check(status == 200 and [e["event"] for e in answer] == ["ADD"], "bob's REST memory untouched", answer)

    # Bob's atom is untouched, and the forged write landed in Alice's tenant.
    data = gql_ok('query($id: String!) { atom(id: $id) { chain { status content } audit { action } } }', BOB, "bob's atom intact", {"id": bob_atom})
    check(data["atom"]["chain"] == [{"status": "active", "content": "Bob's Redis cluster password rotation happens every Friday"}], "bob's atom unchanged", data)
    check([a["action"] for a in data["atom"]["audit"]] == ["memorize"], "no audit entry from alice", data)
    status, answer = gql('query($id: String!) { atom(id: $id) { head } }', BOB, {"id": forged_atom})
    check(answer["errors"][0]["extensions"]["code"] == "NOT_FOUND", "forged scope did not reach bob", answer)

    # --- authentication and scopes ---------------------------------------------------------
    for method, path, body, headers in [
        ("POST", "/graphql", b'{"query":"{ stats { atoms } }"}', {"Content-Type": "application/json"}),
        ("GET", "/sparql?query=ASK%7B%7D", None, {}),
        ("POST", "/mcp", b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}),
    ]:
        status, response_headers, _ = http(method, path, body, None, headers)
        challenge = {k.lower(): v for k, v in response_headers.items()}.get("www-authenticate", "")
        check(status == 401 and challenge.startswith("Bearer") and "resource_metadata" in challenge, f"401 without token on {path}", [status, response_headers])
        status, _, _ = http(method, path, body, "hmg_not_a_real_token", headers)
        check(status == 401, f"401 with a bad token on {path}", status)
    status, _, metadata = http("GET", "/.well-known/oauth-protected-resource")
    check(status == 200 and json.loads(metadata)["resource"].endswith("/mcp"), "protected-resource metadata", metadata)
    status, answer = gql('mutation { memorize(content: "read-only tokens cannot write") { effect } }', ALICE_READ)
    check(status == 403 and answer["errors"][0]["extensions"]["code"] == "FORBIDDEN", "403 for a mutation with a read-only token", [status, answer])
    gql_ok("{ stats { atoms } }", ALICE_READ, "read-only token reads")

    async def read_only_writes(session):
        result = await session.call_tool("memory_memorize", {"content": "read-only tokens cannot write"})
        check(result.is_error and "memory:write" in result.content[0].text, "mcp write with a read-only token", result.content)
        result = await session.call_tool("memory_stats", {})
        check(not result.is_error, "mcp read with a read-only token", result.content)

    await mcp_session(ALICE_READ, read_only_writes)

    # --- GraphQL memorize from concurrent requests: written together, each answered as if alone
    from concurrent.futures import ThreadPoolExecutor
    distinct = ["Alice's on-call rota this week: Priya", "下周三上午十点开架构评审会", "来週の金曜日にリリース判定会議があります",
                "Alice's build cache lives on the NFS share", "Alice pins Node 20 for the storefront"]
    secret = "Alice's deploy bot token is ghp_" + "Q7r8a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
    calls = [(ALICE, c) for c in distinct] + [(ALICE, distinct[0]), (ALICE, distinct[1]), (ALICE, "   "), (ALICE, secret),
                                              (BOB, "Bob moved the Redis cluster to eu-west-2"), (BOB, distinct[2])]
    mutation = "mutation($c: String!) { memorize(content: $c, source: \"user\") { effect atomId dedupedWith reason redactions } }"
    with ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(lambda call: gql_ok(mutation, call[0], f"concurrent memorize {call[1]!r}", {"c": call[1]})["memorize"], calls))
    by_call = {}
    for call, answer in zip(calls, answers):
        by_call.setdefault(call, []).append(answer)
    for content in distinct:
        got = by_call[(ALICE, content)]
        applied = [a for a in got if a["effect"] == "applied"]
        check(len(applied) == 1 and all(a["effect"] == "no_op" and a["dedupedWith"] == applied[0]["atomId"] for a in got if a not in applied),
              f"concurrent memorize: one write for {content!r}, a repeat names it", got)
    blank = by_call[(ALICE, "   ")][0]
    check(blank["effect"] == "rejected" and "empty" in blank["reason"], "concurrent memorize: blank content rejected", blank)
    check(by_call[(ALICE, secret)][0]["effect"] == "applied" and by_call[(ALICE, secret)][0]["redactions"], "concurrent memorize: the secret is redacted", by_call[(ALICE, secret)])
    bobs = by_call[(BOB, distinct[2])][0]
    check(bobs["effect"] == "applied" and bobs["atomId"] != by_call[(ALICE, distinct[2])][0]["atomId"], "concurrent memorize: the same words in another tenant are its own atom", [bobs, by_call[(ALICE, distinct[2])]])
    listed = gql_ok('{ atoms(first: 200) { nodes { atomId content } } }', ALICE, "atoms after the concurrent memorize")["atoms"]["nodes"]
    contents = [n["content"] for n in listed]
    check(all(contents.count(c) == 1 for c in distinct) and not any("eu-west-2" in c or "Q7r8a1B2" in c for c in contents), "concurrent memorize: each stored once, in its tenant, redacted", contents)

    # --- the ready audit queries, through SPARQLWrapper -------------------------------------
    queries = {p.stem: p.read_text() for p in sorted(pathlib.Path(QUERIES).glob("*.rq"))}
    check(set(queries) == {"who_changed_what", "evolution_chains", "lessons_and_sources", "negated_memories", "broken_audit_links"}, "audit query files", sorted(queries))
    rows = sparql_rows(queries["who_changed_what"], ALICE)
    actions = [r["action"]["value"] for r in rows]
    check([int(r["seq"]["value"]) for r in rows] == sorted((int(r["seq"]["value"]) for r in rows), reverse=True), "newest first", rows)
    for action in ["memorize", "correct.replace", "correct.negate", "govern.derive_lesson"]:
        check(action in actions, f"who_changed_what lists {action}", actions)
    rows = sparql_rows(queries["evolution_chains"], ALICE)
    check(len(rows) == 1 and rows[0]["olderStatus"]["value"] == "superseded" and rows[0]["newerContent"]["value"].endswith("Helm 3.14"), "evolution_chains", rows)
    rows = sparql_rows(queries["lessons_and_sources"], ALICE)
    check(len(rows) == 1 and rows[0]["sourceStatus"]["value"] == "sealed" and "secret manager" in rows[0]["lessonContent"]["value"], "lessons_and_sources", rows)
    rows = sparql_rows(queries["negated_memories"], ALICE)
    check(len(rows) == 1 and rows[0]["reason"]["value"] == "staging moved to Nomad" and "Kubernetes" in rows[0]["content"]["value"], "negated_memories", rows)
    rows = sparql_rows(queries["broken_audit_links"], ALICE)
    check(rows == [], "broken_audit_links finds nothing in an intact chain", rows)
    for name, query in queries.items():
        check(all("Redis" not in json.dumps(r) for r in sparql_rows(query, ALICE)), f"{name} stays in tenant")

    # --- malformed and oversized input: 4xx with a message, the server survives ------------
    cases = [
        ("POST", "/graphql", b'{"query": "{ atoms( { "}', {"Content-Type": "application/json"}),
        ("POST", "/graphql", b"not json", {"Content-Type": "application/json"}),
        ("POST", "/graphql", b'{"query": "{ nosuchfield }"}', {"Content-Type": "application/json"}),
        ("POST", "/sparql", b"SELEC * WHERE", {"Content-Type": "application/sparql-query"}),
        ("POST", "/sparql", b"update=DROP+ALL", {"Content-Type": "application/x-www-form-urlencoded"}),
        ("POST", "/sparql", b"SELECT * WHERE { ?s ?p ?o }", {"Content-Type": "image/png"}),
        ("GET", "/sparql?query=SELECT%20*%20WHERE%20%7B%3Fs%20%3Fp%20%3Fo%7D", None, {"Accept": "image/png"}),
        ("POST", "/graphql", b"{" + b" " * (2 * 1024 * 1024) + b"}", {"Content-Type": "application/json"}),
        ("POST", "/sparql", b"SELECT * WHERE { " + b" " * (2 * 1024 * 1024) + b"}", {"Content-Type": "application/sparql-query"}),
        ("POST", "/mcp", b"{" + b" " * (2 * 1024 * 1024) + b"}", {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}),
    ]
    for method, path, body, headers in cases:
        if body is not None and len(body) > 1024 * 1024:
            status, _, answer = http_upload(method, path, body, ALICE, headers)
        else:
            status, _, answer = http(method, path, body, ALICE, headers)
        check(400 <= status < 500 and len(answer) > 0, f"{method} {path} {(body or b'')[:40]!r}: 4xx with a message", [status, answer[:300]])
    # Introspection may nest 20 deep (GraphiQL's start-up query needs 14), other selections 12.
    deep = "{ __schema { types { fields { type { " + "ofType { " * 20 + "name" + " }" * 20 + " } } } } }"
    status, answer = gql(deep, ALICE)
    check(status == 400 and "introspection query is nested" in json.dumps(answer), "an over-deep introspection query is refused", answer)
    status, answer = gql("{ atoms { nodes { scope { " + "a { " * 10 + "b" + " }" * 10 + " } } } }", ALICE)
    check(status == 400 and "nested 14 deep" in json.dumps(answer), "an over-deep query is refused", answer)
    status, _, _ = http("GET", "/healthz")
    check(status == 200, "the server is still healthy")
    print("http surfaces ok")


asyncio.run(main())
