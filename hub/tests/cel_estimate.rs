//! Fuzz target holding the CEL cost estimate to what evaluations really hold: for generated
//! expressions over an object with a large string, a list and a map to range over, the most
//! memory an accepted evaluation holds at once is within what it was estimated to build, plus the
//! evaluator's own overhead. A binary of its own, because its allocator counts for the whole
//! process and no other test may run beside it. `FUZZ_SECONDS` as for the other targets.

mod fuzzing;

use fuzzing::{cel_grammar, fuzz, json_with};
use ks_hub::status::collector::{CEL_STACK, probe};
use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};
use proptest::prelude::*;
use serde_json::{Value as Json, json};

#[global_allocator]
static ALLOCATOR: &PeakMemAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// What an evaluation may hold beyond the values it builds: its scopes, variables and an
/// error message.
const EVALUATION_OVERHEAD: usize = 8 << 10;

/// The most an accepted evaluation of `expression` held at once, and what it was estimated to
/// build; `None` when it was refused.
fn held_and_estimated(expression: &str, object: &Json, status: &Json) -> Option<(usize, u64)> {
    probe(expression, object, status, |estimated, run| {
        ALLOCATOR.reset_peak_memory();
        let _ = run();
        (ALLOCATOR.get_peak_memory(), estimated)
    })
    .ok()
}

#[test]
fn fuzz_cel_estimate() {
    let thread = std::thread::Builder::new().stack_size(CEL_STACK);
    let fuzzing = thread.spawn(|| {
        // Found by the fuzzer: a timezone the time functions cannot parse is copied into the
        // error, twice, as the parsing functions' texts are.
        let big_timezone = json!({"spec": {"big": "b".repeat(8192)}});
        let (held, estimated) = held_and_estimated(
            "(propagation.lastReturnedUpdateTimestamp).getHours(obj.spec.big)",
            &big_timezone,
            &Json::Null,
        )
        .expect("an accepted expression");
        assert!(
            held <= estimated as usize + EVALUATION_OVERHEAD,
            "getHours with an 8 KiB timezone: held {held} bytes, estimated to build {estimated}"
        );

        let object = (
            json_with("[a-c]|big|l|m", Just(Json::from(1))),
            0..40usize,
            0..100_000usize,
        )
            .prop_map(|(extra, items, big)| {
                json!({
                    "extra": extra,
                    "spec": {
                        "big": "b".repeat(big),
                        "l": (0..items).collect::<Vec<_>>(),
                        "m": (0..items).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>(),
                    },
                })
            });
        let status = json_with("[a-c]|spec|status|replicas", Just(Json::from(1)));
        fuzz(
            "cel estimate",
            (cel_grammar(), object, status),
            |(expression, object, status)| {
                if let Some((held, estimated)) = held_and_estimated(&expression.text, &object, &status) {
                    prop_assert!(
                        held <= estimated as usize + EVALUATION_OVERHEAD,
                        "held {held} bytes, estimated to build {estimated}"
                    );
                }
                Ok(())
            },
        )
    });
    if let Err(panic) = fuzzing.expect("a thread for the CEL estimate fuzzer").join() {
        std::panic::resume_unwind(panic);
    }
}
