//! Integrity on the stack: what a user deletes stays deleted, what others own is left alone,
//! nothing is silently emptied. One module per kind of damage; each test failed before its fix.

mod agent;
mod content;
mod incarnation;
mod ownership;
mod removal;
mod sharing;
mod status_labels;

use ks_tests::harness::run;

ks_tests::stack_main!(
    run,
    [
        agent::tests(),
        content::tests(),
        incarnation::tests(),
        ownership::tests(),
        removal::tests(),
        sharing::tests(),
        status_labels::tests()
    ]
    .into_iter()
    .flatten()
    .collect()
);
