//! The `hmg` binary: parses arguments, sets up tracing (to stderr) and runs
//! the library's CLI adapter.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    smaller_c_thread_stacks();
    let cli = hmg::cli::Cli::parse();
    // HMG_LOG_SPANS=1 also logs each span as it closes, with the time it
    // was busy and idle: where a request's wall time went.
    let span_events = if std::env::var_os("HMG_LOG_SPANS").is_some_and(|v| !v.is_empty() && v != "0") {
        tracing_subscriber::fmt::format::FmtSpan::CLOSE
    } else {
        tracing_subscriber::fmt::format::FmtSpan::NONE
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_span_events(span_events)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HMG_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // Unlocked handles: `hmg mcp` writes protocol messages to stdout from
    // the async runtime while this frame is still live.
    let result = hmg::cli::run(cli, &mut std::io::stdout(), &mut std::io::stderr()).map_err(anyhow::Error::from);
    match result {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(error) => {
            eprintln!("hmg: {error:#}");
            ExitCode::from(hmg::cli::Exit::Internal as u8)
        }
    }
}

/// Gives threads that C and C++ code starts with default attributes a
/// 2 MiB stack (Rust's own default) instead of the 8 MiB of `ulimit -s`.
///
/// Each time a store opens, RocksDB starts up to 15 threads per column
/// family to open table files: about 165 threads for one CLI command.
/// glibc caches 40 MiB of ended threads' stacks, four of 8 MiB, and unmaps
/// the rest; each unmap flushes the TLB of the other core, which waits for
/// it. Nineteen 2 MiB stacks fit the cache, so the threads reuse them. The
/// engines' OpenMP workers and RocksDB's background threads use well under
/// 2 MiB (RocksDB runs on musl's 128 KiB default elsewhere).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn smaller_c_thread_stacks() {
    unsafe extern "C" {
        // glibc 2.18 and later.
        fn pthread_setattr_default_np(attr: *const libc::pthread_attr_t) -> libc::c_int;
    }
    const STACK: usize = 2 << 20;
    // SAFETY: the attribute object is initialised before use and destroyed
    // after; the call copies it. This runs first in main, before any thread
    // is started.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_attr_init(&mut attr) != 0 {
            return;
        }
        if libc::pthread_attr_setstacksize(&mut attr, STACK) == 0 {
            pthread_setattr_default_np(&attr);
        }
        libc::pthread_attr_destroy(&mut attr);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn smaller_c_thread_stacks() {}
