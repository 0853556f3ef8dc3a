"""A whole agent session against `hmg`, driven by the official MCP Python SDK.

Usage:
  mcp_session.py session stdio HMG STORE REPO_DIR
  mcp_session.py session http URL
  mcp_session.py two-repos HMG STORE REPO_A REPO_B PLAIN_DIR
  mcp_session.py burst HMG STORE CWD
  mcp_session.py guest-burst HMG STORE CWD
  mcp_session.py call HMG STORE CWD TOOL ARGUMENTS_JSON   (prints the result as JSON)

Every step asserts on the structured results; any failure exits non-zero with
the step named. Run by tests/integration/mcp.rs (the test command installs
the SDK).
"""

import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def check(condition, step, detail=None):
    if not condition:
        raise AssertionError(f"{step}: {json.dumps(detail, ensure_ascii=False, default=str)[:2000]}")


@asynccontextmanager
async def stdio_session(hmg, store, cwd):
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": os.environ.get("PATH", ""), "HMG_LOG": "warn"}
    # The remote store and writer node, when a test runs this node over one.
    shared = ("HMG_STORE_URL", "HMG_STORE_USER", "HMG_STORE_PASSWORD", "HMG_STORE_WRITER", "HMG_NODE_SECRET")
    for name in ("HMG_EMBEDDER", "HMG_MODEL_DIR", "ORT_DYLIB_PATH", "XDG_DATA_HOME", "USER") + shared:
        if name in os.environ:
            env[name] = os.environ[name]
    params = StdioServerParameters(command=hmg, args=["--store", store, "mcp"], cwd=cwd, env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            yield session


@asynccontextmanager
async def http_session(url):
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            yield session


async def call(session, tool, arguments):
    result = await session.call_tool(tool, arguments)
    return result


async def ok(session, tool, arguments, step):
    result = await call(session, tool, arguments)
    check(not result.is_error, f"{step}: {tool} failed", [c.text for c in result.content if hasattr(c, "text")])
    data = result.structured_content
    check(isinstance(data, dict), f"{step}: structured content", data)
    # The text content carries the same JSON.
    texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
    check(texts and json.loads(texts[0]) == data, f"{step}: text mirrors structured content", texts)
    return data


async def tool_error(session, tool, arguments, field, step):
    result = await call(session, tool, arguments)
    check(result.is_error, f"{step}: expected isError", result.structured_content)
    text = " ".join(c.text for c in result.content if hasattr(c, "text"))
    check(field in text, f"{step}: message names '{field}'", text)
    return text


async def agent_session(session):
    init = await session.initialize()
    check(init.server_info.name == "hmg", "initialize: server name", init.server_info.name)

    tools = {t.name: t for t in (await session.list_tools()).tools}
    expected = {"memory_memorize", "memory_recall", "memory_correct", "memory_govern", "memory_handoff", "memory_stats", "reflect"}
    check(set(tools) == expected, "tools/list: names", sorted(tools))
    for name, tool in tools.items():
        check(tool.output_schema is not None, f"tools/list: {name} output schema")
        check(len(tool.description or "") < 2048, f"tools/list: {name} description size")
        check("scope" not in (tool.input_schema.get("required") or []), f"tools/list: {name} scope optional")
        annotations = tool.annotations
        check(annotations is not None and annotations.open_world_hint is False, f"tools/list: {name} closed world")
    check(tools["memory_recall"].annotations.read_only_hint is True, "recall is read-only")
    check(tools["memory_stats"].annotations.read_only_hint is True, "stats is read-only")
    check(tools["memory_correct"].annotations.destructive_hint is True, "correct is destructive")
    check(tools["memory_govern"].annotations.destructive_hint is True, "govern is destructive")
    check(tools["reflect"].annotations.destructive_hint is True, "reflect is destructive")
    check(tools["memory_correct"].input_schema["required"] == ["target_atom", "action", "reason"], "correct: required", tools["memory_correct"].input_schema)

    # The seeds' example calls validate against the published input schemas.
    import jsonschema
    seed_scope = {"tenant_id": "qiankun", "workspace": "HMG-AI", "repository": "HMG-DEV-brach", "branch": "main"}
    examples = {
        "memory_memorize": {"content": "本项目用 PostgreSQL 16 做主数据库，不用 MongoDB，因为需要事务和复杂查询", "source": "user", "scope": seed_scope},
        "memory_recall": {"query": "PostgreSQL 连接池配置"},
        "memory_correct": {"target_atom": "01J9ZK8V3QX7N2M4R6T8W0YB1C", "action": "replace", "reason": "v3 已迁移到 PostgreSQL，旧决策过时", "new_content": "主数据库用 PostgreSQL 16，替换原 MongoDB 方案"},
        "memory_govern": {"target_atom": "01J9ZK8V3QX7N2M4R6T8W0YB1C", "action": "derive_lesson", "reason": "原文包含泄露的 API key", "lesson_content": "不要在代码或记忆中硬编码 API key，使用环境变量"},
        "memory_handoff": {"summary": "修复了 login.py 的空指针问题，根因是 session 过期时 get_session() 返回 None，在 line 38 加了有效性检查，pytest 全部通过。风险：并发场景下 session 刷新可能有竞态。下一步：给 session 模块补集成测试。", "source": "agent"},
        "memory_stats": {},
    }
    for name, example in examples.items():
        jsonschema.Draft202012Validator(tools[name].input_schema).validate(example)
    # Seed 004's two reflect examples.
    for example in [{"actions_csv": "summarize,promote,expire,decay,archive", "dry_run": True, "time_window_hours": 24, "limit": 500},
                    {"actions_csv": "archive", "dry_run": False, "bucket": "personal", "limit": 100}]:
        jsonschema.Draft202012Validator(tools["reflect"].input_schema).validate(example)
    for name, bad in {"memory_memorize": {"content": 5}, "memory_recall": {}, "memory_correct": {"target_atom": "x", "action": "undo", "reason": "r"}}.items():
        check(not jsonschema.Draft202012Validator(tools[name].input_schema).is_valid(bad), f"schema of {name} rejects {bad}")

    # memorize, with a secret that must come back redacted
    stored = await ok(session, "memory_memorize", {
        "content": "The billing service connects with postgres://billing:S3cr3tPassw0rd@db.internal:5432/billing and uses PgBouncer",
        "source": "user",
    }, "memorize secret")
    check(stored["effect"] == "applied" and len(stored["atom_id"]) == 26, "memorize secret: applied", stored)
    secret_atom = stored["atom_id"]
    zh = await ok(session, "memory_memorize", {"content": "本项目用 PostgreSQL 16 做主数据库，不用 MongoDB，因为需要事务和复杂查询", "source": "user"}, "memorize zh")
    ja = await ok(session, "memory_memorize", {"content": "デプロイの前に必ずデータベースのマイグレーションを実行すること", "source": "user"}, "memorize ja")
    en = await ok(session, "memory_memorize", {"content": "The API rate limit is 100 requests per minute per token", "source": "agent"}, "memorize en")
    # duplicate
    dup = await ok(session, "memory_memorize", {"content": "The API rate limit is 100 requests per minute per token", "source": "agent"}, "duplicate")
    check(dup["effect"] == "no_op" and dup["deduped_with"] == en["atom_id"] and dup["atom_id"] == en["atom_id"], "duplicate: no_op", dup)
    # rejection (not an error: the seeds' rejected effect with a reason)
    rejected = await ok(session, "memory_memorize", {"content": "   "}, "rejection")
    check(rejected["effect"] == "rejected" and rejected.get("reason"), "rejection: reason", rejected)

    # recall in three languages
    hits = await ok(session, "memory_recall", {"query": "billing database connection"}, "recall en")
    check(hits["atoms"] and hits["atoms"][0]["atom_id"] == secret_atom, "recall en: top hit", hits)
    content = hits["atoms"][0]["content"]
    check("S3cr3tPassw0rd" not in content and "REDACTED" in content, "recall en: secret redacted", content)
    for atom in hits["atoms"]:
        check(0.0 <= atom["score"] <= 1.0 and atom["created_at"] and atom["source"], "recall en: fields", atom)
    hits = await ok(session, "memory_recall", {"query": "主数据库"}, "recall zh")
    check(hits["atoms"] and hits["atoms"][0]["atom_id"] == zh["atom_id"], "recall zh: top hit", hits)
    hits = await ok(session, "memory_recall", {"query": "マイグレーション", "max_results": 3}, "recall ja")
    check(hits["atoms"] and hits["atoms"][0]["atom_id"] == ja["atom_id"] and len(hits["atoms"]) <= 3, "recall ja: top hit", hits)

    # correct / replace, then recall the new head
    replaced = await ok(session, "memory_correct", {
        "target_atom": en["atom_id"], "action": "replace", "reason": "limit raised in v3",
        "new_content": "The API rate limit is 500 requests per minute per token",
    }, "replace")
    check(replaced["effect"] == "applied" and replaced["target_atom"] == en["atom_id"] and replaced["new_atom_id"], "replace: applied", replaced)
    hits = await ok(session, "memory_recall", {"query": "API rate limit"}, "recall after replace")
    ids = [a["atom_id"] for a in hits["atoms"]]
    check(ids and ids[0] == replaced["new_atom_id"] and en["atom_id"] not in ids, "recall after replace: new head only", hits)
    stale = await ok(session, "memory_correct", {"target_atom": en["atom_id"], "action": "negate", "reason": "r"}, "correct superseded")
    check(stale["effect"] == "rejected" and replaced["new_atom_id"] in stale["reason"], "correct superseded: names the head", stale)

    # errors the model can fix: isError naming the field
    await tool_error(session, "memory_correct", {"target_atom": en["atom_id"], "action": "replace", "reason": "r"}, "new_content", "replace without new_content")
    await tool_error(session, "memory_correct", {"target_atom": en["atom_id"], "action": "undo", "reason": "r"}, "action", "bad action")
    await tool_error(session, "memory_correct", {"target_atom": "01J9ZK8V3QX7N2M4R6T8W0YB1C", "action": "negate", "reason": "r"}, "01J9ZK8V3QX7N2M4R6T8W0YB1C", "unknown atom")
    await tool_error(session, "memory_recall", {"query": "x", "max_results": "ten"}, "max_results", "wrong type")
    await tool_error(session, "memory_memorize", {"contents": "typo"}, "contents", "unknown field")
    await tool_error(session, "memory_govern", {"target_atom": secret_atom, "action": "derive_lesson", "reason": "r"}, "lesson_content", "lesson without content")

    # govern: quarantine, then derive_lesson
    quarantined = await ok(session, "memory_govern", {"target_atom": zh["atom_id"], "action": "quarantine", "reason": "under review"}, "quarantine")
    check(quarantined["effect"] == "applied", "quarantine: applied", quarantined)
    hits = await ok(session, "memory_recall", {"query": "主数据库"}, "recall quarantined")
    check(zh["atom_id"] not in [a["atom_id"] for a in hits["atoms"]], "quarantined atom out of recall", hits)
    lesson = await ok(session, "memory_govern", {
        "target_atom": secret_atom, "action": "derive_lesson", "reason": "the memory held a password",
        "lesson_content": "Never store database passwords in memory; reference the secret manager entry instead",
    }, "derive_lesson")
    check(lesson["effect"] == "applied" and lesson["lesson_atom_id"], "derive_lesson: lesson atom", lesson)
    hits = await ok(session, "memory_recall", {"query": "database passwords secret manager"}, "recall lesson")
    check(hits["atoms"] and hits["atoms"][0]["atom_id"] == lesson["lesson_atom_id"], "recall lesson: top hit", hits)

    # handoff and stats
    handoff = await ok(session, "memory_handoff", {"summary": "Raised the API rate limit to 500/min; load-tested with k6; next: update the client SDK docs", "source": "agent"}, "handoff")
    check(handoff["effect"] == "applied" and handoff["atom_id"], "handoff: applied", handoff)
    stats = await ok(session, "memory_stats", {}, "stats")
    check(stats["atoms"] >= 6 and stats["snapshot_version"] > 0 and set(stats["indexes"]) >= {"semantic", "keyword", "temporal", "categorical"}, "stats: fields", stats)
    # A scope the model sends is ignored: the forged repository is not where the write lands.
    forged = await ok(session, "memory_memorize", {"content": "Forged scope memory about the zebra project", "scope": {"tenant_id": "mallory", "repository": "elsewhere"}}, "forged scope")
    hits = await ok(session, "memory_recall", {"query": "zebra project"}, "recall forged")
    check(hits["atoms"] and hits["atoms"][0]["atom_id"] == forged["atom_id"], "forged scope: stored in the resolved scope", hits)
    # reflect: a dry run, then the same run for real, as seed 004 advises.
    later = {"actions_csv": "decay", "until": "2031-01-01T00:00:00Z"}
    dry = await session.call_tool("reflect", dict(later, dry_run=True))
    text = dry.content[0].text
    check(not dry.is_error and text.startswith("### Memory Reflect Report") and "Dry Run: true" in text, "reflect dry run text", text)
    real = await session.call_tool("reflect", later)
    text = real.content[0].text
    check(not real.is_error and "Dry Run: false" in text, "reflect real run", text)
    check(real.structured_content["counts"] == dry.structured_content["counts"] and real.structured_content["counts"]["decayed"] > 0, "reflect: same counts", [dry.structured_content, real.structured_content])
    ids = real.structured_content["audit_record_ids"]
    check(len(ids) == real.structured_content["counts"]["decayed"] and all(i in text for i in ids[:20]), "reflect: audit ids listed", text)
    bad = await session.call_tool("reflect", {"actions_csv": "dream"})
    check(bad.is_error and "dream" in bad.content[0].text, "reflect: unsupported action", bad.content)
    print("session ok")


async def two_repos(hmg, store, repo_a, repo_b, plain_dir):
    # A server outside any repository writes tenant-wide memories.
    async with stdio_session(hmg, store, plain_dir) as t:
        await t.initialize()
        wide = await ok(t, "memory_memorize", {"content": "Every repository follows the lily build cache retention policy", "source": "user"}, "tenant-wide write")
        check(wide["effect"] == "applied", "tenant-wide write applied", wide)
    async with stdio_session(hmg, store, repo_a) as a, stdio_session(hmg, store, repo_b) as b:
        await a.initialize()
        await b.initialize()
        # Both servers write at once.
        results = await asyncio.gather(
            *[ok(a, "memory_memorize", {"content": f"Repository A uses the orchid build cache, note {i}"}, "write a") for i in range(5)],
            *[ok(b, "memory_memorize", {"content": f"Repository B uses the tulip build cache, note {i}"}, "write b") for i in range(5)],
        )
        check(all(r["effect"] == "applied" for r in results), "two repos: writes applied", results)
        hits_a = await ok(a, "memory_recall", {"query": "build cache", "max_results": 20}, "recall a")
        hits_b = await ok(b, "memory_recall", {"query": "build cache", "max_results": 20}, "recall b")
        texts_a = [x["content"] for x in hits_a["atoms"]]
        texts_b = [x["content"] for x in hits_b["atoms"]]
        check(len(texts_a) == 6 and sum("orchid" in t for t in texts_a) == 5 and sum("lily" in t for t in texts_a) == 1, "repo A sees its memories and the tenant-wide one", texts_a)
        check(len(texts_b) == 6 and sum("tulip" in t for t in texts_b) == 5 and sum("lily" in t for t in texts_b) == 1, "repo B sees its memories and the tenant-wide one", texts_b)
    print("two repos ok")


async def burst(hmg, store, cwd):
    """Many memory_memorize calls at once (asyncio.gather pipelines them):
    the server writes them together; each must be answered as if alone."""
    async with stdio_session(hmg, store, cwd) as session:
        await session.initialize()
        await burst_on(session)
    print("burst ok")


async def guest_burst(hmg, store, cwd):
    """The same burst from a server that does not hold the store: relayed
    to the one that does, as one message, and written there together."""
    async with stdio_session(hmg, store, cwd) as owner:
        await owner.initialize()
        await ok(owner, "memory_stats", {}, "the owner opens the store")
        async with stdio_session(hmg, store, cwd) as guest:
            await guest.initialize()
            await burst_on(guest)
        seen = await ok(owner, "memory_recall", {"query": "ステージング環境3のデータベース"}, "the owner sees the guest's burst")
        check(any("ステージング環境3" in a["content"] for a in seen["atoms"]), "the owner recalls a memory of the burst", seen)
    print("guest burst ok")


async def burst_on(session):
    """Sixty-five memory_memorize calls at once, each checked as if alone."""
    distinct = []
    for i in range(20):
        distinct += [f"Deploy window {i} for the billing service is Tuesday at {i % 12 + 1} pm",
                     f"第{i}号服务的负责人是王芳，值班电话在运维手册里",
                     f"ステージング環境{i}のデータベースは毎晩三時にリセットされます"]
    twice = [distinct[0], distinct[31], distinct[59]]
    secret = "The staging deploy key is ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    calls = [{"content": c, "source": "agent"} for c in distinct] + [{"content": c} for c in twice]
    calls += [{"content": "   "}, {"content": secret}]
    results = await asyncio.gather(*[ok(session, "memory_memorize", a, f"burst call {n}") for n, a in enumerate(calls)])
    by_content = {}
    for arguments, result in zip(calls, results):
        by_content.setdefault(arguments["content"], []).append(result)
    for content in distinct:
        answers = by_content[content]
        applied = [r for r in answers if r["effect"] == "applied"]
        check(len(applied) == 1, f"one write applied for {content!r}", answers)
        for r in answers:
            if r["effect"] != "applied":
                check(r["effect"] == "no_op" and r.get("deduped_with") == applied[0]["atom_id"], "the repeat names the write", answers)
    check(by_content["   "][0]["effect"] == "rejected" and "empty" in by_content["   "][0]["reason"], "blank content rejected", by_content["   "])
    redacted = by_content[secret][0]
    check(redacted["effect"] == "applied" and redacted.get("redactions"), "the secret is redacted", redacted)
    ids = {r["atom_id"] for r in results if r["effect"] == "applied"}
    check(len(ids) == len(distinct) + 1, "one atom per distinct memory", sorted(ids))
    stats = await ok(session, "memory_stats", {}, "stats after the burst")
    check(stats["atoms"] == len(distinct) + 1, "the store holds them all", stats)
    hits = await ok(session, "memory_recall", {"query": "第7号服务的负责人是谁"}, "recall after the burst")
    check(any("第7号服务" in a["content"] for a in hits["atoms"]), "a memory of the burst is recalled", hits)
    # The burst is over: a lone call is answered on its own.
    alone = await ok(session, "memory_memorize", {"content": "A lone memory after the burst"}, "lone call")
    check(alone["effect"] == "applied", "lone call applied", alone)


async def main(argv):
    mode = argv[1]
    if mode == "session" and argv[2] == "stdio":
        async with stdio_session(argv[3], argv[4], argv[5]) as session:
            await agent_session(session)
    elif mode == "session" and argv[2] == "http":
        async with http_session(argv[3]) as session:
            await agent_session(session)
    elif mode == "call":
        async with stdio_session(argv[2], argv[3], argv[4]) as session:
            await session.initialize()
            result = await session.call_tool(argv[5], json.loads(argv[6]))
            texts = [c.text for c in result.content if hasattr(c, "text")]
            print(json.dumps({"is_error": bool(result.is_error), "structured": result.structured_content, "text": texts}, ensure_ascii=False))
    elif mode == "burst":
        await burst(*argv[2:5])
    elif mode == "guest-burst":
        await guest_burst(*argv[2:5])
    elif mode == "two-repos":
        await two_repos(*argv[2:7])
    else:
        raise SystemExit(f"unknown mode {argv[1:]}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
