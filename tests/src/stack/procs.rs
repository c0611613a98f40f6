//! Processes the stack starts: each runs in its own process group (so a Ctrl-C in the shell
//! that ran `make up` does not reach it), logs to `.stack/logs/<name>.log`, and is remembered
//! by PID in `.stack/pids/<name>.pid` so that `make down` stops exactly what was started.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Where process state lives.
#[derive(Clone, Debug)]
pub struct Procs {
    pub pids: PathBuf,
    pub logs: PathBuf,
}

impl Procs {
    pub fn new(state: &Path) -> anyhow::Result<Procs> {
        let procs = Procs {
            pids: state.join("pids"),
            logs: state.join("logs"),
        };
        std::fs::create_dir_all(&procs.pids)?;
        std::fs::create_dir_all(&procs.logs)?;
        Ok(procs)
    }

    pub fn log_file(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.log"))
    }

    /// The PID of `name` if it was started and is still running.
    pub fn running(&self, name: &str) -> Option<u32> {
        let record = std::fs::read_to_string(self.pids.join(format!("{name}.pid"))).ok()?;
        running(&record)
    }

    /// Starts `binary args` as `name` unless it is already running (and runs the binary as it is
    /// now: one running a binary since rebuilt is restarted). Returns true if started.
    pub fn ensure(&self, name: &str, binary: &Path, args: &[String], env: &[(&str, &str)]) -> anyhow::Result<bool> {
        if let Some(pid) = self.running(name) {
            if !executable_replaced(pid) {
                return Ok(false);
            }
            eprintln!("{name}: its binary was rebuilt; restarting it");
            self.stop(name, Duration::from_secs(10))?;
        }
        if !binary.exists() {
            bail!(
                "{} is missing: run `make deps` (it builds the upstream components)",
                binary.display()
            );
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file(name))?;
        let mut command = Command::new(binary);
        command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name} ({})", binary.display()))?;
        std::fs::write(self.pids.join(format!("{name}.pid")), record(child.id()))?;
        // Reaped once it exits, so a parent that lives on (a test binary, the bench, which restart
        // the stack's processes many times) collects no zombies: the bench had 122 after four
        // runs. A parent that exits first (`ks-stack up`) leaves it to init. Either way its PID
        // may be given to another process then, which the record's start time tells apart.
        std::thread::spawn(move || child.wait());
        Ok(true)
    }

    /// Fails with the log's tail if `name` has exited.
    pub fn check_alive(&self, name: &str) -> anyhow::Result<()> {
        if self.running(name).is_none() {
            bail!(
                "{name} exited; last lines of {}:\n{}",
                self.log_file(name).display(),
                self.tail(name, 20)
            );
        }
        Ok(())
    }

    /// The last `lines` lines of a process's log.
    pub fn tail(&self, name: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log_file(name)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Names of every process with a PID file, in start order.
    pub fn started(&self) -> Vec<String> {
        let mut entries: Vec<(std::time::SystemTime, String)> = std::fs::read_dir(&self.pids)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().strip_suffix(".pid")?.to_string();
                Some((e.metadata().ok()?.modified().ok()?, name))
            })
            .collect();
        entries.sort();
        entries.into_iter().map(|(_, n)| n).collect()
    }

    /// Stops `name`: SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub fn stop(&self, name: &str, grace: Duration) -> anyhow::Result<()> {
        self.stop_all(&[name.to_string()], grace)
    }

    /// Stops several processes at once: SIGTERM to all, then SIGKILL to those still running
    /// after `grace`, so shutting down a stack takes one grace period, not one per process.
    pub fn stop_all(&self, names: &[String], grace: Duration) -> anyhow::Result<()> {
        let running: Vec<(&String, u32)> = names.iter().filter_map(|n| Some((n, self.running(n)?))).collect();
        for (_, pid) in &running {
            signal(*pid, "TERM")?;
        }
        let deadline = Instant::now() + grace;
        for (name, pid) in &running {
            if !wait_gone(*pid, deadline.saturating_duration_since(Instant::now())) {
                signal(*pid, "KILL")?;
                if !wait_gone(*pid, Duration::from_secs(5)) {
                    bail!("{name} (pid {pid}) survived SIGKILL");
                }
            }
        }
        // Only the stopped process's records: a supervisor (the stand-in kubelet) may already
        // have started the next one under the same name, whose record must stay.
        for name in names {
            if self.running(name).is_none() {
                let _ = std::fs::remove_file(self.pids.join(format!("{name}.pid")));
            }
        }
        Ok(())
    }

    /// Sends `name` the signal `signal` (`KILL`, `STOP`, `CONT`), as a crash or a stall would
    /// (no clean-up); after `KILL`, waits until it is gone. Fails when it is not running.
    pub fn signal(&self, name: &str, signal_name: &str) -> anyhow::Result<()> {
        let pid = self.running(name).with_context(|| format!("{name} is not running"))?;
        signal(pid, signal_name)?;
        if signal_name == "KILL" && !wait_gone(pid, Duration::from_secs(5)) {
            bail!("{name} (pid {pid}) survived SIGKILL");
        }
        Ok(())
    }
}

/// A PID file's content: the process's id and when it started (clock ticks since boot, as
/// `/proc` has it), so that another process given the same id later (PIDs wrap at 32,768
/// here) is neither taken for it nor stopped by `make down`.
fn record(pid: u32) -> String {
    match started_at(pid) {
        Some(start) => format!("{pid} {start}"),
        None => pid.to_string(),
    }
}

/// The PID a record names, if that process still runs. A record of a bare PID (written before
/// start times were kept) is taken at its word.
fn running(record: &str) -> Option<u32> {
    let mut fields = record.split_whitespace();
    let pid: u32 = fields.next()?.parse().ok()?;
    let start: Option<u64> = fields.next().and_then(|s| s.parse().ok());
    let started = started_at(pid)?;
    start.is_none_or(|start| start == started).then_some(pid)
}

/// When process `pid` started (field 22 of `/proc/<pid>/stat`, clock ticks since boot), unless
/// it is gone; a zombie (exited, not yet reaped) counts as gone.
fn started_at(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: the state (field 3), then fields 4 to 22.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let zombie = fields.next()? == "Z";
    let started = fields.nth(18)?.parse().ok()?;
    (!zombie).then_some(started)
}

fn alive(pid: u32) -> bool {
    started_at(pid).is_some()
}

fn signal(pid: u32, name: &str) -> anyhow::Result<()> {
    let _ = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status()?;
    Ok(())
}

fn wait_gone(pid: u32, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    while alive(pid) {
        if Instant::now() > until {
            return false;
        }
        // Exit of a process we did not spawn in this run can only be observed by polling.
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Whether the file process `pid` runs was replaced since it started (as a rebuild replaces it):
/// Linux then shows its executable as deleted.
fn executable_replaced(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe.to_string_lossy().ends_with(" (deleted)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_whose_binary_was_replaced_is_told_apart() -> anyhow::Result<()> {
        let binary = std::env::temp_dir().join(format!("ks-sleeper-{}", std::process::id()));
        std::fs::copy("/bin/sleep", &binary)?;
        let mut child = Command::new(&binary).arg("30").spawn()?;
        let current = executable_replaced(child.id());
        // As a rebuild does: a new file in its place.
        std::fs::remove_file(&binary)?;
        std::fs::copy("/bin/sleep", &binary)?;
        let replaced = executable_replaced(child.id());
        child.kill()?;
        child.wait()?;
        std::fs::remove_file(&binary)?;
        assert!(!current, "the binary it runs is in place");
        assert!(replaced, "the binary it runs was replaced");
        Ok(())
    }

    #[test]
    fn a_process_given_a_recorded_pid_later_is_not_taken_for_the_recorded_one() -> anyhow::Result<()> {
        let mut child = Command::new("sleep").arg("30").spawn()?;
        let pid = child.id();
        let ours = running(&record(pid));
        let start = started_at(pid).context("its start time")?;
        let another = running(&format!("{pid} {}", start + 1));
        let bare = running(&pid.to_string());
        child.kill()?;
        child.wait()?;
        let gone = running(&format!("{pid} {start}"));
        assert_eq!(ours, Some(pid));
        assert_eq!(another, None, "started at another time: another process");
        assert_eq!(bare, Some(pid), "a record from before start times were kept");
        assert_eq!(gone, None);
        Ok(())
    }
}
