//! What scenarios measure besides their own clocks: latency percentiles, and a process's
//! memory and CPU time from /proc.

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
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 0, utime 11, stime 12.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
