//! `shale-server [config-file] [--directive value …]`, started like `redis-server`.

use std::process::ExitCode;
use std::sync::Arc;

use shale_server::config::{AppendFsync, Config, LogLevel};
use shale_server::state::ServerState;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help" || a == "-v" || a == "--version") {
        eprintln!(
            "shale-server {} (Redis-protocol server on the lsm engine)\n\
             Usage: shale-server [/path/to/shale.conf] [--directive value …]\n\
             Examples: shale-server --port 7777 --dir /var/lib/shale",
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
    }
    let config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let default_level = match config.loglevel {
        LogLevel::Debug => "debug",
        LogLevel::Verbose | LogLevel::Notice => "info",
        LogLevel::Warning => "warn",
        LogLevel::Nothing => "off",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_level.into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "fatal");
            ExitCode::from(1)
        }
    }
}

async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let sync_mode = match config.appendfsync {
        AppendFsync::Always => lsm::SyncMode::Always,
        AppendFsync::EverySec => lsm::SyncMode::EverySec,
        AppendFsync::No => lsm::SyncMode::Never,
    };
    let opts = lsm::Options::default()
        .sync_mode(sync_mode)
        .write_buffer_size(config.write_buffer_size as usize)
        .block_cache_size(config.block_cache_size as usize)
        .compression(config.compression)
        .compaction_filter(Arc::new(shale_server::storage::ExpiryFilter));
    let db = lsm::Db::open(&config.dir, opts)?;
    let mut listeners = Vec::new();
    if config.port != 0 {
        for addr in &config.bind {
            let listener = tokio::net::TcpListener::bind((addr.as_str(), config.port)).await?;
            tracing::info!(target: "shale::net", addr = %listener.local_addr()?, "listening");
            listeners.push(listener);
        }
    }
    let state = Arc::new(ServerState::new(config, db.clone()));
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "shale-server ready to accept connections");
    shale_server::net::serve(listeners, state, shutdown_signal()).await;
    db.close()?;
    tracing::info!("shale-server stopped");
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
