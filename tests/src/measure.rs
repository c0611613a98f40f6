//! What benchmarks and tests measure besides their own clocks: latency percentiles, and a process's
//! memory and CPU time from /proc.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::stack::Procs;

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

/// User plus system CPU time of a process, in seconds.
fn proc_cpu_seconds(pid: u32) -> f64 {
    stat_seconds(&pid.to_string(), OWN)
}

/// Fields of `/proc/<pid>/stat`, counted after the command (state is 0): a process's own user and
/// system time, and those of its children it has waited for.
const OWN: &[usize] = &[11, 12];
const CHILDREN: &[usize] = &[13, 14];

/// The sum of some time fields of `/proc/<pid>/stat`, in seconds (clock ticks of 1/100 s).
fn stat_seconds(pid: &str, fields: &[usize]) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let all: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields
        .iter()
        .map(|&i| all.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
        .sum();
    ticks / 100.0
}

/// CPU seconds of each of the stack's processes, and of the bench's own (itself, and the
/// kubectl processes it ran and waited for), from a start on: where a shared machine's time went.
pub struct CpuByProcess {
    procs: Procs,
    start: BTreeMap<String, f64>,
}

/// The bench's own share: its children's (kubectl) and its own.
const KUBECTL: &str = "kubectl (the bench's)";
const BENCH: &str = "ks-bench";

impl CpuByProcess {
    /// From now on, for the stack's processes.
    pub fn start(procs: &Procs) -> CpuByProcess {
        CpuByProcess {
            procs: procs.clone(),
            start: now(procs),
        }
    }

    /// CPU seconds since the start, by process, the most first (processes started since count
    /// from 0; those gone since are left out).
    pub fn since(&self) -> Vec<(String, f64)> {
        let mut used: Vec<(String, f64)> = now(&self.procs)
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

/// Resident memory of each running process of the stack now, in MiB, the most first: what the
/// CPU shares leave out, such as an agent holding a handler per object.
pub fn rss_by_process(procs: &Procs) -> Vec<(String, f64)> {
    let mut rss: Vec<(String, f64)> = running(procs)
        .map(|(name, pid)| (name, rss_kib(pid) as f64 / 1024.0))
        .collect();
    rss.sort_by(|a, b| b.1.total_cmp(&a.1));
    rss
}

/// The stack's running processes, by the name of their `<name>.pid`.
fn running(procs: &Procs) -> impl Iterator<Item = (String, u32)> + '_ {
    std::fs::read_dir(&procs.pids)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.path().file_stem()?.to_str()?.to_string();
            let pid = procs.running(&name)?;
            Some((name, pid))
        })
}

/// CPU seconds so far of each running process of the stack (by its `<name>.pid`) and of the bench.
fn now(procs: &Procs) -> BTreeMap<String, f64> {
    let mut cpu: BTreeMap<String, f64> = running(procs)
        .map(|(name, pid)| (name, proc_cpu_seconds(pid)))
        .collect();
    // Children's times count once they have been waited for, as each kubectl has.
    cpu.insert(KUBECTL.to_string(), stat_seconds("self", CHILDREN));
    cpu.insert(BENCH.to_string(), stat_seconds("self", OWN));
    cpu
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_process_counts_the_running_and_leaves_out_the_gone() {
        let state = std::env::temp_dir().join(format!("ks-bench-cpu-{}", std::process::id()));
        let procs = Procs::new(&state).unwrap();
        std::fs::write(procs.pids.join("me.pid"), std::process::id().to_string()).unwrap();
        // PIDs stop well below this (the kernel's pid_max is at most 2^22).
        std::fs::write(procs.pids.join("gone.pid"), "99999999").unwrap();
        let cpu = CpuByProcess::start(&procs);
        let (mut spin, deadline) = (0u64, std::time::Instant::now() + Duration::from_secs(10));
        while proc_cpu_seconds(std::process::id()) < cpu.start["me"] + 0.05 && std::time::Instant::now() < deadline {
            spin = spin.wrapping_add(1);
        }
        let used: BTreeMap<String, f64> = cpu.since().into_iter().collect();
        let rss: BTreeMap<String, f64> = rss_by_process(&procs).into_iter().collect();
        let _ = std::fs::remove_dir_all(&state);
        assert!(used["me"] >= 0.05, "{used:?} after {spin} turns");
        assert!(!used.contains_key("gone"), "{used:?}");
        assert!(used.contains_key(KUBECTL) && used.contains_key(BENCH), "{used:?}");
        assert!(rss["me"] > 0.0 && !rss.contains_key("gone"), "{rss:?}");
    }
}
