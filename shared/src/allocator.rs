//! jemalloc's own account of the heap, on /metrics. RSS alone cannot tell memory the program
//! holds from pages the allocator keeps for reuse or has yet to return, nor either from what is
//! not the heap at all (code, thread stacks).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use tikv_jemalloc_ctl::{epoch, stats};

const HELP: &str = "The heap as jemalloc counts it: allocated (held by the program), active (in pages \
                    holding allocations), resident (jemalloc's pages in RAM, its metadata and unreturned \
                    free pages included), metadata, mapped, retained (address space kept but returned)";

/// Adds `kubestellar_allocator_bytes{state}`, read from jemalloc at each scrape. Only for a
/// binary whose global allocator is jemalloc: another's would report an unused heap.
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(Jemalloc));
}

#[derive(Debug)]
struct Jemalloc;

impl Collector for Jemalloc {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // The statistics are a snapshot, taken when the epoch advances.
        if epoch::advance().is_err() {
            return Ok(());
        }
        let states = [
            ("allocated", stats::allocated::read()),
            ("active", stats::active::read()),
            ("resident", stats::resident::read()),
            ("metadata", stats::metadata::read()),
            ("mapped", stats::mapped::read()),
            ("retained", stats::retained::read()),
        ];
        let mut family =
            encoder.encode_descriptor("kubestellar_allocator", HELP, Some(&Unit::Bytes), MetricType::Gauge)?;
        for (state, bytes) in states {
            if let Ok(bytes) = bytes {
                ConstGauge::new(bytes as u64).encode(family.encode_family(&[("state", state)])?)?;
            }
        }
        Ok(())
    }
}
