//! The process as Prometheus' client libraries export it (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_start_time_seconds`,
//! `process_open_fds`, `process_max_fds`, `process_threads`), read from `/proc/self` at each
//! scrape, and `kubestellar_build_info{service, version, cluster}` (the WDS a hub serves, the
//! WEC an agent serves; dashboards join on it to pick a WDS or a WEC). Dashboards for Kubernetes controllers
//! (upstream KubeStellar's among them) chart CPU and memory from the first two. Where `/proc` is
//! not Linux's, the process metrics are left out.

use std::fs;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

/// Clock ticks per second in `/proc/<pid>/stat`: Linux reports times there in USER_HZ, which is
/// 100 on every architecture it supports (a kernel ABI constant, unlike the kernel's own HZ).
const TICKS_PER_SECOND: f64 = 100.0;

/// Adds the process metrics and the build info of `service`, serving `cluster`, to a registry.
pub fn register(registry: &mut Registry, service: &'static str, cluster: Option<&str>) {
    registry.register_collector(Box::new(ProcessCollector {
        service,
        cluster: cluster.unwrap_or_default().to_string(),
    }));
}

#[derive(Debug)]
struct ProcessCollector {
    service: &'static str,
    cluster: String,
}

/// What `/proc` says of the process.
#[derive(Debug, PartialEq)]
struct Sample {
    cpu_seconds: f64,
    threads: i64,
    start_time_seconds: f64,
    resident_bytes: i64,
    virtual_bytes: i64,
}

/// Reads `stat` (of the process), `status` (its memory) and the system's boot time from
/// `/proc/stat`.
fn sample(stat: &str, status: &str, system_stat: &str) -> Option<Sample> {
    // The command name, in parentheses, may hold spaces and parentheses: fields follow the last ')'.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // `fields[0]` is field 3 of proc(5) (state).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let boot_time: u64 = system_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let kilobytes = |key: &str| -> Option<i64> {
        let value = status.lines().find_map(|line| line.strip_prefix(key))?;
        value
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<i64>()
            .ok()
            .map(|kb| kb * 1024)
    };
    Some(Sample {
        cpu_seconds: (field(14)? + field(15)?) as f64 / TICKS_PER_SECOND,
        threads: field(20)? as i64,
        start_time_seconds: boot_time as f64 + field(22)? as f64 / TICKS_PER_SECOND,
        resident_bytes: kilobytes("VmRSS:")?,
        virtual_bytes: kilobytes("VmSize:")?,
    })
}

/// The soft limit on open files from `/proc/self/limits`.
fn max_fds(limits: &str) -> Option<i64> {
    let line = limits.lines().find(|line| line.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut info = encoder.encode_descriptor(
            "kubestellar_build_info",
            "1, labelled with the service and the version built",
            None,
            MetricType::Gauge,
        )?;
        let labels = [
            ("service", self.service),
            ("version", env!("CARGO_PKG_VERSION")),
            ("cluster", &self.cluster),
        ];
        ConstGauge::new(1).encode(info.encode_family(&labels)?)?;

        let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
        let Some(sample) = sample(
            &read("/proc/self/stat"),
            &read("/proc/self/status"),
            &read("/proc/stat"),
        ) else {
            return Ok(());
        };
        let cpu = encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        ConstCounter::new(sample.cpu_seconds).encode(cpu)?;
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size in bytes",
                Some(Unit::Bytes),
                sample.resident_bytes,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes",
                Some(Unit::Bytes),
                sample.virtual_bytes,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                None,
                sample.threads,
            ),
        ];
        for (name, help, unit, value) in gauges {
            ConstGauge::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                MetricType::Gauge,
            )?)?;
        }
        let start = encoder.encode_descriptor(
            "process_start_time",
            "Start time of the process since unix epoch in seconds",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        ConstGauge::new(sample.start_time_seconds).encode(start)?;
        if let Ok(entries) = fs::read_dir("/proc/self/fd") {
            let open = encoder.encode_descriptor(
                "process_open_fds",
                "Number of open file descriptors",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(entries.count() as i64).encode(open)?;
        }
        if let Some(max) = max_fds(&read("/proc/self/limits")) {
            let limit = encoder.encode_descriptor(
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(max).encode(limit)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (ks hub (x)) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 75 0 0 20 0 7 0 12345 \
                        104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
    const STATUS: &str =
        "Name:\tks-hub\nVmPeak:\t  110000 kB\nVmSize:\t  102400 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n";

    #[test]
    fn reads_cpu_memory_threads_and_start_from_proc() {
        let sample = sample(STAT, STATUS, "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n").unwrap();
        assert_eq!(
            sample,
            Sample {
                cpu_seconds: 3.25,
                threads: 7,
                start_time_seconds: 1_700_000_123.45,
                resident_bytes: 10_485_760,
                virtual_bytes: 104_857_600,
            }
        );
        assert_eq!(sample_or_none("not a stat line"), None);
    }

    fn sample_or_none(stat: &str) -> Option<Sample> {
        sample(stat, STATUS, "btime 1\n")
    }

    #[test]
    fn reads_the_soft_limit_on_open_files() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max processes             94054                94054                processes\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_fds(limits), Some(1024));
        assert_eq!(max_fds(""), None);
    }

    #[test]
    fn this_process_is_exported() {
        let mut registry = Registry::default();
        register(&mut registry, "test", Some("wds1"));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
            "kubestellar_build_info{service=\"test\",version=\"",
        ] {
            assert!(text.lines().any(|line| line.starts_with(name)), "{name} in {text}");
        }
        assert!(text.contains(",cluster=\"wds1\"} 1\n"), "{text}");
    }
}
