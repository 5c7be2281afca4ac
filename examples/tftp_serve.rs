//! Runs the shardboot TFTP server alone, for benches and manual tests, until Ctrl-C.
//! `shardboot serve` replaces this once the listener is wired into the main config.
//!
//! `cargo run --release --example tftp_serve -- --listen 127.0.0.1:6969 --root /usr/lib/ipxe`

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use shardboot::config::TftpSettings;
use shardboot::tftp::{self, TftpMetrics};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6969")]
    listen: SocketAddr,
    /// Directory to serve.
    #[arg(long, default_value = "/usr/lib/ipxe")]
    root: PathBuf,
    /// Serve all transfers from the listening port.
    #[arg(long)]
    single_port: bool,
    /// Largest windowsize to agree to.
    #[arg(long, default_value_t = 64)]
    max_windowsize: u16,
    /// Concurrent transfers.
    #[arg(long, default_value_t = 512)]
    max_transfers: usize,
    /// Concurrent transfers per client address.
    #[arg(long, default_value_t = 8)]
    max_per_client: usize,
    /// Print the Prometheus metrics on exit.
    #[arg(long)]
    metrics: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let a = Args::parse();
    let settings = Arc::new(TftpSettings {
        root: a.root,
        single_port: a.single_port,
        max_windowsize: a.max_windowsize,
        max_transfers: a.max_transfers,
        max_per_client: a.max_per_client,
        ..TftpSettings::default()
    });
    let socket = tokio::net::UdpSocket::bind(a.listen)
        .await
        .with_context(|| format!("binding {}", a.listen))?;
    let metrics = Arc::new(TftpMetrics::default());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        stop.cancel();
    });
    let root = tftp::FileRoot::new(settings);
    tftp::run(socket, root, metrics.clone(), shutdown).await?;
    if a.metrics {
        let mut s = String::new();
        metrics.render_prometheus(&mut s);
        print!("{s}");
    }
    Ok(())
}
