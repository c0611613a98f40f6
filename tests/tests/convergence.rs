//! The generated convergence test (issue "Integrity"): seeded random batches of what users do,
//! through kubectl, each followed by a wait until the stack matches an oracle written apart
//! from the hub's code; a failure prints its seed and a shrunk list of operations to rerun.
//! `ks_tests::convergence` has the operations, the oracle and the settings
//! (`KS_CONVERGENCE_SECONDS`, `KS_CONVERGENCE_SEED`, `KS_CONVERGENCE_OPS`, ...).

use ks_tests::convergence::{Run, Settings};
use ks_tests::harness::{Ctx, run};
use ks_tests::stack_test;

const PATH: &[&str] = &["hub-wds1", "ocm-agent-cluster1", "ocm-agent-cluster2"];

ks_tests::stack_main!(run, vec![stack_test!(generated_user_operations_converge, PATH)]);

async fn generated_user_operations_converge(ctx: Ctx) -> anyhow::Result<()> {
    let settings = Settings::from_env()?;
    let run = Run::setup(&ctx).await?;
    let outcome = run.test(&settings).await;
    run.teardown()?;
    outcome
}
