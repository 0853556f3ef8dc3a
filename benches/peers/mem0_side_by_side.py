"""HMG and mem0 side by side: the same 10k memories, the same fresh short
queries, on this machine, in one run.

  HMG   a fresh `hmg mcp` process (stdio), driven by the official MCP Python
        SDK: `hmg import` of the memories first, then one `memory_recall` per
        query, timed at the client (JSON-RPC over pipes included). Then a
        second fresh `hmg mcp` on the same store answers the same queries
        for a bare client (JSON lines over the pipes, no SDK), once new to
        the process and once repeated: what the SDK client adds, and what
        the query embedding costs (fresh minus repeated).
  mem0  mem0ai in process (FAISS + all-MiniLM-L6-v2): `add(..., infer=False)`
        for the first memories (timed: mem0's ingest rate; its FAISS store
        rewrites its index file on every add, so 10k adds take hours), the
        rest stored as `add` stores them (same payload: data, hash, dates,
        user_id, BM25 lemmas) through its vector store in batches; then
        `search(query, limit=10)` per query. Its embedder is
        the same all-MiniLM-L6-v2 int8 ONNX model HMG's setup installs, on
        ONNX Runtime (mem0's fastembed embedder would download a model; the
        offline equivalent is given to it as its `embedding_model`). No LLM
        is called (infer=False; search does not call one).

Every query is new to both (a number appended), so no cache answers it.
Reports p50/p95 per system and their ratio. Run with the Python that
scripts/peers.sh prints:

  eval "$(scripts/peers.sh)"
  $HMG_PEERS_PYTHON benches/peers/mem0_side_by_side.py --hmg target/release/hmg [--memories 10000] [--queries 200]
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAMES = ["Caroline", "Melanie", "Jon", "Gina", "Tanaka", "Li Wei", "Priya", "Omar", "Sofia", "Mateo", "Aiko", "Lars"]
VERBS = ["moved the backup job to", "started a pottery class in", "switched the billing retries to", "booked a trip to",
         "deployed the search service on", "adopted a cat from", "gave a talk about caching in", "fixed the flaky test in",
         "bought a road bike in", "migrated Redis to", "learned to bake sourdough in", "signed the lease for"]
OBJECTS = ["Lisbon", "the third cluster", "exponential backoff", "Kyoto", "a shelter near the park", "the Friday meetup",
           "the staging region", "Berlin", "the old warehouse", "the Osaka office", "the mountain cabin", "Toronto"]
WHEN = ["last Monday", "in March", "after the outage", "before the holidays", "on her birthday", "two weeks ago",
        "during the sprint", "in the spring", "yesterday", "at the end of May"]


def memories(n):
    rng = random.Random(7)
    return [f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(WHEN)} (note {i})." for i in range(n)]


def queries(n):
    rng = random.Random(11)
    forms = ["Where did {name} go {when}?", "What did {name} do about {obj}?", "Who {verb} {obj}?",
             "When did {name} start with {obj}?", "What happened with {obj} {when}?"]
    out = []
    for i in range(n):
        form = rng.choice(forms)
        out.append(form.format(name=rng.choice(NAMES), when=rng.choice(WHEN), obj=rng.choice(OBJECTS), verb=rng.choice(VERBS)) + f" #{i}")
    return out


def summary(label, samples):
    samples = sorted(samples)
    p50 = statistics.median(samples)
    p95 = samples[min(len(samples) - 1, int(round(0.95 * (len(samples) - 1))))]
    print(f"  {label:<44} n={len(samples):<4} p50={p50:8.2f} ms  p95={p95:8.2f} ms", flush=True)
    return p50, p95


async def run_hmg(hmg, texts, asked, warmups):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    store = tempfile.mkdtemp(prefix="hmg-peers-")
    lines = "".join(json.dumps({"content": t}) + "\n" for t in texts)
    started = time.perf_counter()
    subprocess.run([hmg, "--store", store, "import", "-"], input=lines.encode(), check=True, stdout=subprocess.DEVNULL, cwd=store)
    print(f"  hmg import: {len(texts)} memories in {time.perf_counter() - started:.1f} s", flush=True)
    env = {k: v for k, v in os.environ.items() if k in ("HOME", "PATH", "XDG_DATA_HOME", "USER", "HMG_EMBEDDER", "HMG_MODEL_DIR")}
    env["HMG_LOG"] = "warn"
    params = StdioServerParameters(command=hmg, args=["--store", store, "mcp"], cwd=store, env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for q in warmups:
                await session.call_tool("memory_recall", {"query": q})
            samples, hits = [], 0
            for q in asked:
                t = time.perf_counter()
                result = await session.call_tool("memory_recall", {"query": q})
                samples.append((time.perf_counter() - t) * 1e3)
                if result.is_error:
                    raise SystemExit(f"hmg memory_recall failed: {result.content}")
                hits += bool((result.structured_content or {}).get("atoms"))
    return samples, hits, store, env


def run_hmg_bare(hmg, store, env, asked, warmups):
    """The same queries through a bare JSON-RPC client: (fresh, repeated)."""
    server = subprocess.Popen([hmg, "--store", store, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=store, env=env)
    sent = 0

    def call(method, params, notify=False):
        nonlocal sent
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            sent += 1
            message["id"] = sent
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()
        while not notify:
            line = server.stdout.readline()
            if not line:
                raise SystemExit("hmg mcp closed its output")
            reply = json.loads(line)
            if reply.get("id") == sent:
                if "result" not in reply or reply["result"].get("isError"):
                    raise SystemExit(f"hmg {method} failed: {reply}")
                return reply

    def timed(queries):
        samples = []
        for q in queries:
            t = time.perf_counter()
            call("tools/call", {"name": "memory_recall", "arguments": {"query": q}})
            samples.append((time.perf_counter() - t) * 1e3)
        return samples

    try:
        call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bare", "version": "0"}})
        call("notifications/initialized", {}, notify=True)
        timed(warmups)
        return timed(asked), timed(asked)
    finally:
        server.stdin.close()
        server.wait()


class OnnxMiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX, the model HMG's setup installs) with
    mean pooling and L2 normalization: mem0's embedder interface."""

    def __init__(self, model_dir, threads):
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.np = np
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(Path(model_dir) / "model.onnx"), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        # The model's tokenizer.json pads every text to 128 tokens; one text
        # needs none (47 ms a query with it, measured).
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(256)
        self.inputs = {i.name for i in self.session.get_inputs()}

    def embed(self, text, memory_action=None):
        np = self.np
        enc = self.tokenizer.encode(text.replace("\n", " "))
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feed)[0]
        pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        vector = pooled[0] / max(np.linalg.norm(pooled[0]), 1e-12)
        return vector.tolist()


def run_mem0(texts, asked, warmups, model_dir, threads, add_sample):
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("OPENAI_API_KEY", "not-used-no-llm-is-called")
    from mem0 import Memory

    home = tempfile.mkdtemp(prefix="mem0-peers-")
    os.environ["MEM0_DIR"] = home
    config = {
        "vector_store": {"provider": "faiss", "config": {"path": os.path.join(home, "faiss"), "embedding_model_dims": 384}},
        "history_db_path": os.path.join(home, "history.db"),
    }
    memory = Memory.from_config(config)
    memory.embedding_model = OnnxMiniLM(model_dir, threads)
    import hashlib
    import uuid
    from datetime import datetime, timezone

    from mem0.utils.lemmatization import lemmatize_for_bm25

    sample = min(add_sample, len(texts))
    started = time.perf_counter()
    for t in texts[:sample]:
        memory.add(t, user_id="bench", infer=False)
    elapsed = time.perf_counter() - started
    print(f"  mem0 add (infer=False): {sample} memories in {elapsed:.1f} s = {sample / elapsed:.0f}/s", flush=True)
    started = time.perf_counter()
    rest = texts[sample:]
    now = datetime.now(timezone.utc).isoformat()
    vectors = [memory.embedding_model.embed(t, "add") for t in rest]
    embedded = time.perf_counter() - started
    payloads = [
        {"user_id": "bench", "data": t, "hash": hashlib.md5(t.encode()).hexdigest(), "created_at": now, "updated_at": now,
         "text_lemmatized": lemmatize_for_bm25(t)}
        for t in rest
    ]
    memory.vector_store.insert(vectors=vectors, ids=[str(uuid.uuid4()) for _ in rest], payloads=payloads)
    print(f"  mem0 vector store: {len(rest)} more memories stored as add stores them in {time.perf_counter() - started:.1f} s "
          f"(embedding {embedded:.1f} s)", flush=True)
    for q in warmups:
        memory.search(q, filters={"user_id": "bench"}, limit=10)
    samples, hits = [], 0
    for q in asked:
        t = time.perf_counter()
        found = memory.search(q, filters={"user_id": "bench"}, limit=10)
        samples.append((time.perf_counter() - t) * 1e3)
        hits += bool(found.get("results") if isinstance(found, dict) else found)
    return samples, hits


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hmg", required=True)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--model-dir", default=os.path.join(os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share")), "hmg/models/all-MiniLM-L6-v2"))
    parser.add_argument("--mem0-adds", type=int, default=300, help="memories given to mem0 through add() (timed); the rest go to its vector store directly")
    parser.add_argument("--mem0-threads", type=int, default=1, help="ONNX Runtime threads for mem0's embedder (0: ONNX Runtime's default)")
    args = parser.parse_args()
    texts = memories(args.memories)
    asked = queries(args.queries + 5)
    warmups, asked = asked[:5], asked[5:]
    print(f"{args.memories} memories, {len(asked)} fresh short queries (after 5 warm-up queries), same machine, one run", flush=True)
    print(f"mem0 (in process, FAISS + all-MiniLM-L6-v2 ONNX, {args.mem0_threads or 'default'} thread(s))", flush=True)
    mem0_samples, mem0_hits = run_mem0(texts, asked, warmups, args.model_dir, args.mem0_threads, args.mem0_adds)
    mem0 = summary("mem0 search", mem0_samples)
    print("HMG (fresh `hmg mcp` over stdio, MCP Python SDK client)", flush=True)
    hmg_samples, hmg_hits, store, env = asyncio.run(run_hmg(args.hmg, texts, asked, warmups))
    hmg = summary("hmg memory_recall", hmg_samples)
    print("HMG again (another fresh `hmg mcp`, the same store, a bare JSON-RPC client: no SDK)", flush=True)
    bare_fresh, bare_repeated = run_hmg_bare(args.hmg, store, env, asked, warmups)
    summary("hmg memory_recall, bare client, fresh", bare_fresh)
    summary("hmg memory_recall, bare client, repeated", bare_repeated)
    shutil.rmtree(store, ignore_errors=True)
    print(f"ratio mem0/hmg: p50 {mem0[0] / hmg[0]:.2f}x, p95 {mem0[1] / hmg[1]:.2f}x (above 1: HMG faster)")
    print(f"queries answered with results: hmg {hmg_hits}/{len(asked)}, mem0 {mem0_hits}/{len(asked)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
