//! What scenarios measure besides their own clocks: latency percentiles, and a process's
//! memory and CPU time from /proc.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// p50/p90/p99/max of some durations.
pub fn summary(mut latencies: Vec<Duration>) -> String {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
        at(0.5),
        at(0.9),
        at(0.99),
        latencies.last().copied().unwrap_or_default()
    )
}

/// Resident memory of a process, in KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")
                    .map(|v| v.trim().trim_end_matches(" kB").parse().ok())
            })
        })
        .flatten()
        .unwrap_or(0)
}

/// Peak resident memory (sum over the hub's processes) and CPU seconds, sampled until dropped.
pub struct Usage {
    peak_kib: Arc<Mutex<u64>>,
    cpu_start: f64,
    pids: Vec<u32>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Usage {
    pub fn start(pids: Vec<u32>) -> Usage {
        let peak_kib = Arc::new(Mutex::new(0));
        let (peak, watched) = (peak_kib.clone(), pids.clone());
        let sampler = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let rss: u64 = watched.iter().map(|p| rss_kib(*p)).sum();
                let mut peak = peak.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                *peak = (*peak).max(rss);
            }
        });
        Usage {
            peak_kib,
            cpu_start: pids.iter().map(|p| proc_cpu_seconds(*p)).sum(),
            pids,
            sampler,
        }
    }

    /// (peak MiB, CPU seconds) so far.
    pub fn read(&self) -> (f64, f64) {
        let peak = *self.peak_kib.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let cpu: f64 = self.pids.iter().map(|p| proc_cpu_seconds(*p)).sum();
        (peak as f64 / 1024.0, cpu - self.cpu_start)
    }
}

impl Drop for Usage {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// User plus system CPU time of a process, in seconds (clock ticks of 1/100 s).
fn proc_cpu_seconds(pid: u32) -> f64 {
    stat_ticks(&pid.to_string(), &[11, 12]) / 100.0
}

/// The sum of some fields of `/proc/<pid>/stat`, counted after the command (state is 0).
fn stat_ticks(pid: &str, fields: &[usize]) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let all: Vec<&str> = rest.split_whitespace().collect();
    fields
        .iter()
        .map(|&i| all.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
        .sum()
}

/// CPU seconds of each of the stack's processes, and of the bench's own (itself, and the
/// kubectl processes it ran and waited for), from a start on: where a shared machine's time went.
pub struct CpuByProcess {
    pids: std::path::PathBuf,
    start: BTreeMap<String, f64>,
}

/// The bench's own share: its children's (kubectl) and its own.
const KUBECTL: &str = "kubectl (the bench's)";
const BENCH: &str = "ks-bench";

impl CpuByProcess {
    /// From now on, for the processes whose PIDs are in `pids` (the stack's `<name>.pid` files).
    pub fn start(pids: &std::path::Path) -> CpuByProcess {
        let pids = pids.to_path_buf();
        let start = now(&pids);
        CpuByProcess { pids, start }
    }

    /// CPU seconds since the start, by process, the most first (processes started since count
    /// from 0; those gone since are left out).
    pub fn since(&self) -> Vec<(String, f64)> {
        let mut used: Vec<(String, f64)> = now(&self.pids)
            .into_iter()
            .map(|(name, cpu)| {
                let before = self.start.get(&name).copied().unwrap_or(0.0);
                (name, cpu - before)
            })
            .collect();
        used.sort_by(|a, b| b.1.total_cmp(&a.1));
        used
    }
}

fn now(pids: &std::path::Path) -> BTreeMap<String, f64> {
    let mut cpu = BTreeMap::new();
    for entry in std::fs::read_dir(pids).into_iter().flatten().flatten() {
        let path = entry.path();
        let (Some(name), Ok(pid)) = (
            path.file_stem().and_then(|s| s.to_str()).map(str::to_string),
            std::fs::read_to_string(&path),
        ) else {
            continue;
        };
        cpu.insert(name, stat_ticks(pid.trim(), &[11, 12]) / 100.0);
    }
    // Children's times count once they have been waited for, as each kubectl has.
    cpu.insert(KUBECTL.to_string(), stat_ticks("self", &[13, 14]) / 100.0);
    cpu.insert(BENCH.to_string(), stat_ticks("self", &[11, 12]) / 100.0);
    cpu
}
