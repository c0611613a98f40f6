//! The workload the stack's real nodes run, packed as the image `ks-pod` (`images/build.sh
//! ks-pod`). With no command it waits for a stop signal: the pod sandbox's "pause" container,
//! which containerd starts for every Pod. `serve` answers every HTTP request with 200 until it is
//! stopped: a workload whose readiness probe passes. `crash` exits with status 1 at once: a
//! container that crash-loops. `eat` takes memory and holds it: a container over its limit.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser)]
#[command(
    name = "ks-pod",
    version,
    about = "A pause container, a workload that serves HTTP, one that crashes or one that takes memory"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Answer every HTTP request with 200 until stopped.
    Serve {
        /// The port to listen on, on every address.
        #[arg(long, default_value_t = 8080)]
        port: u16,
    },
    /// Exit with status 1 at once.
    Crash,
    /// Take this much memory (every page written), then wait until stopped.
    Eat {
        #[arg(long)]
        mebibytes: usize,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match Args::parse().command {
        None => {
            stopped().await;
            ExitCode::SUCCESS
        }
        Some(Command::Serve { port }) => {
            let listener = match TcpListener::bind(("0.0.0.0", port)).await {
                Ok(listener) => listener,
                Err(err) => {
                    eprintln!("ks-pod: cannot listen on port {port}: {err}");
                    return ExitCode::FAILURE;
                }
            };
            println!("ks-pod: serving on port {port}");
            tokio::select! {
                () = stopped() => ExitCode::SUCCESS,
                () = serve(listener) => ExitCode::FAILURE,
            }
        }
        Some(Command::Crash) => {
            eprintln!("ks-pod: crashing, as asked");
            ExitCode::FAILURE
        }
        Some(Command::Eat { mebibytes }) => {
            let eaten = vec![1u8; mebibytes << 20];
            println!("ks-pod: holding {} MiB", eaten.len() >> 20);
            stopped().await;
            drop(eaten);
            ExitCode::SUCCESS
        }
    }
}

/// Returns on SIGTERM or SIGINT. As a container's PID 1 the process has no default action for
/// them: without handlers it would ignore the kubelet's stop and be killed after the grace period.
async fn stopped() {
    let (Ok(mut term), Ok(mut interrupt)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        eprintln!("ks-pod: cannot handle stop signals");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = interrupt.recv() => {}
    }
}

/// Answers each connection's first request with `200 OK`.
async fn serve(listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n")
                .await;
        });
    }
}
