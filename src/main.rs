//! The `hmg` binary: parses arguments, sets up tracing (to stderr) and runs
//! the library's CLI adapter.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
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
