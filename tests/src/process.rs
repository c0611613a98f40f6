//! Runs one of the project's binaries and talks to its HTTP endpoint, with deadlines.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A started binary whose log lines (standard error) are collected.
pub struct Running {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    /// Starts `binary` with `args`, plain-text logs at info level.
    pub fn start(binary: &str, args: &[&str]) -> Running {
        Running::start_with_env(binary, args, &[])
    }

    /// Like [`Running::start`], with extra environment variables.
    pub fn start_with_env(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut child = Command::new(binary)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child: Some(child),
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a log line containing `needle`, returning it.
    pub fn wait_for_line(&mut self, needle: &str, deadline: Duration) -> String {
        let until = Instant::now() + deadline;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no log line containing {needle:?} within {deadline:?}; saw:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(mut self, deadline: Duration) -> ExitStatus {
        let child = self.child.take().expect("running child");
        stop_child(child, deadline).unwrap_or_else(|| panic!("did not exit within {deadline:?} of SIGTERM"))
    }
}

impl Running {
    /// The process id, e.g. to read its memory use from /proc.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends SIGTERM to `child` and waits up to `grace` for its exit status; kills it and returns
/// `None` when it does not exit in time.
pub fn stop_child(mut child: Child, grace: Duration) -> Option<ExitStatus> {
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let (send, exited) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(child.wait());
    });
    match exited.recv_timeout(grace) {
        Ok(Ok(status)) => Some(status),
        _ => {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            None
        }
    }
}

/// The address in a log line such as `... address=127.0.0.1:40123 ...`.
pub fn address_in(line: &str) -> SocketAddr {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("address="))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address=IP:PORT in {line:?}"))
}

/// A plain HTTP/1.1 GET; returns the status code and body.
pub fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // HTTP/1.0, so that the answer is never chunked.
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (code, body.to_string())
}

/// What every binary must do: answer `--help` and `--version`, serve its endpoint (started with
/// `args`; `/readyz` answers 200 when `ready`, else 503), and exit cleanly on SIGTERM.
pub fn check_binary(binary: &str, name: &str, args: &[&str], ready: bool) {
    let help = Command::new(binary).arg("--help").output().unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    for flag in ["--log-format", "--http-address", "--leader-elect", "--version"] {
        assert!(help.contains(flag), "{name} --help mentions {flag}:\n{help}");
    }
    let version = Command::new(binary).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8(version.stdout).unwrap().trim(),
        format!("{name} {}", env!("CARGO_PKG_VERSION"))
    );

    let bad = Command::new(binary).arg("--log-format=xml").output().unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("xml"),
        "bad flag values are named"
    );

    let mut all_args = vec!["--http-address", "127.0.0.1:0"];
    all_args.extend(args);
    let mut running = Running::start(binary, &all_args);
    let address = address_in(&running.wait_for_line("serving /metrics", Duration::from_secs(20)));
    assert_eq!(http_get(address, "/healthz"), (200, "ok".into()));
    assert_eq!(http_get(address, "/readyz").0, if ready { 200 } else { 503 });
    let (code, metrics) = http_get(address, "/metrics");
    assert_eq!(code, 200);
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    assert_eq!(http_get(address, "/nope").0, 404);
    let status = running.terminate(Duration::from_secs(10));
    assert!(status.success(), "{name} exits 0 on SIGTERM, got {status}");
}

/// A kubeconfig whose only server refuses connections: for starting a binary that must keep
/// running (alive, not ready) while its cluster is unreachable.
pub fn unreachable_kubeconfig() -> std::path::PathBuf {
    // One path for every test process (its content never changes), so that runs leave one file
    // behind, not one per process.
    let path = std::env::temp_dir().join("ks-unreachable.kubeconfig");
    let config = "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\nclusters:\n- name: nowhere\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: nobody\n  user: {}\ncontexts:\n- name: nowhere\n  context: {cluster: nowhere, user: nobody}\n";
    // Tests share the path: each writes aside, then renames, so that a process starting
    // meanwhile never reads a half-written file.
    let thread = format!("{:?}", std::thread::current().id()).replace(|c: char| !c.is_alphanumeric(), "");
    let aside = path.with_extension(format!("{}-{thread}", std::process::id()));
    std::fs::write(&aside, config).expect("write kubeconfig");
    std::fs::rename(&aside, &path).expect("move kubeconfig into place");
    path
}
