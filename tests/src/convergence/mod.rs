//! A generated convergence test on the stack (issue "Integrity"): random, seeded batches of what
//! users do ([`ops`]), carried out with kubectl ([`drive`]); after each batch the stack must come
//! to show what an oracle written apart from the hub's code expects ([`oracle`], [`check`]), and
//! stay so for [`HOLD`]. A failure is shrunk ([`shrink`]) to a short list of operations that
//! fails the same way from a clean state, printed with its seed so that it can be run again:
//!
//! ```text
//! KS_CONVERGENCE_SEED=<n> KS_CONVERGENCE_OPS='<file or inline JSON>' cargo test -p ks-tests --test convergence
//! ```
//!
//! Settings (environment): `KS_CONVERGENCE_SECONDS` (how long to generate, default 150),
//! `KS_CONVERGENCE_SEED` (default: from the clock, printed), `KS_CONVERGENCE_OPS` (run these
//! batches instead of generating), `KS_CONVERGENCE_SHRINK_REPLAYS` (default 20),
//! `KS_CONVERGENCE_KEEP_FAILED` (set: a failed episode is left on the stack to look at, not
//! cleaned up; with `KS_CONVERGENCE_SHRINK_REPLAYS=0`).

pub mod check;
pub mod drive;
pub mod manifests;
pub mod names;
pub mod observe;
pub mod ops;
pub mod oracle;
pub mod shrink;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::harness::Ctx;
use crate::tools::Tools;
use check::{Difference, History};
use names::{ITS, Names, WDS, WECS};
use observe::{Observed, Spaces};
use ops::{Generator, Labels, Op};
use oracle::Model;

/// How long the stack may take to match the oracle after a batch.
pub const DEADLINE: Duration = Duration::from_secs(90);
/// How long it must then go on matching: a state that flips back (an object brought back, a
/// copy rewritten) is caught here rather than in a later batch.
pub const HOLD: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_secs(1);

/// What the test does, from the environment.
#[derive(Clone, Debug)]
pub struct Settings {
    pub seed: u64,
    pub seconds: u64,
    /// Batches to run instead of generating.
    pub ops: Option<Vec<Vec<Op>>>,
    pub replays: usize,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Settings {
    pub fn from_env() -> anyhow::Result<Settings> {
        let number = |name: &str, default: u64| -> anyhow::Result<u64> {
            env(name).map_or(Ok(default), |v| v.parse().with_context(|| format!("{name}={v}")))
        };
        let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        let ops = match env("KS_CONVERGENCE_OPS") {
            None => None,
            Some(text) => {
                // cargo runs tests in the crate's directory: a relative path is the repository's.
                let json = if text.trim_start().starts_with('[') {
                    text
                } else {
                    let path = crate::harness::repo_root().join(&text);
                    std::fs::read_to_string(&path).with_context(|| format!("KS_CONVERGENCE_OPS={}", path.display()))?
                };
                Some(serde_json::from_str(&json).context("KS_CONVERGENCE_OPS: a JSON list of batches of operations")?)
            }
        };
        Ok(Settings {
            seed: number("KS_CONVERGENCE_SEED", clock.as_secs() ^ u64::from(clock.subsec_nanos()))?,
            seconds: number("KS_CONVERGENCE_SECONDS", 150)?,
            ops,
            replays: usize::try_from(number("KS_CONVERGENCE_SHRINK_REPLAYS", 20)?)?,
        })
    }
}

/// How an episode failed: in which batch (`None`: while cleaning up), and how.
#[derive(Clone, Debug)]
pub struct Failure {
    pub batch: Option<usize>,
    pub differences: Vec<Difference>,
}

impl Failure {
    /// What differed, about which kind of object: a shrunk list must fail with one of these.
    fn kinds(&self) -> BTreeSet<(&'static str, Option<names::Kind>)> {
        self.differences.iter().map(|d| (d.what, d.about)).collect()
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.batch {
            Some(batch) => writeln!(f, "after batch {}:", batch + 1)?,
            None => writeln!(f, "while cleaning up:")?,
        }
        for difference in &self.differences {
            writeln!(f, "  {difference}")?;
        }
        Ok(())
    }
}

/// One run of the test: its CRD, its tools, its clients.
pub struct Run<'a> {
    ctx: &'a Ctx,
    tools: Tools,
    spaces: Spaces,
    /// The group of the run's CRD.
    widgets: String,
    /// The WECs' ManagedCluster labels before the run.
    wecs: [Labels; 2],
}

/// Batches in one generated episode, at most: then it is cleaned up and another starts (its
/// namespaces are used up by then, and a failure replays from the episode's start).
const EPISODE_BATCHES: usize = 30;

/// Where an episode's batches come from.
enum Batches<'a> {
    Given(&'a [Vec<Op>]),
    Generated {
        generator: &'a mut Generator,
        until: Instant,
    },
}

impl Batches<'_> {
    fn next(&mut self, done: usize, model: &Model) -> Option<Vec<Op>> {
        match self {
            Batches::Given(batches) => batches.get(done).cloned(),
            Batches::Generated { generator, until } => {
                (Instant::now() < *until && done < EPISODE_BATCHES).then(|| generator.batch(model))
            }
        }
    }
}

impl<'a> Run<'a> {
    pub async fn setup(ctx: &'a Ctx) -> anyhow::Result<Run<'a>> {
        let tools = Tools::new(ctx, "convergence")?;
        let mut wecs = Vec::new();
        for wec in WECS {
            wecs.push((wec.to_string(), ctx.client(wec).await?));
        }
        let spaces = Spaces {
            wds: ctx.client(WDS).await?,
            its: ctx.client(ITS).await?,
            wecs,
        };
        let widgets = format!("{}.convergence.ks-tests.io", ctx.unique_name("cv"));
        let run = Run {
            ctx,
            wecs: drive::wec_labels(&tools)?,
            tools,
            spaces,
            widgets,
        };
        drive::install_crd(&run.tools, &run.names())?;
        Ok(run)
    }

    pub fn teardown(&self) -> anyhow::Result<()> {
        drive::remove_crd(&self.tools, &self.names())
    }

    /// Names for a new episode.
    fn names(&self) -> Names {
        Names {
            episode: self.ctx.unique_name("cv"),
            widgets: self.widgets.clone(),
        }
    }

    /// Generates episodes of batches for the time asked (or runs the given batches), and on a
    /// failure shrinks it; the error tells the failure, its seed and the operations that
    /// reproduce it.
    pub async fn test(&self, settings: &Settings) -> anyhow::Result<()> {
        let (batches, failure) = match &settings.ops {
            Some(batches) => {
                eprintln!("convergence: running the {} given batches", batches.len());
                self.episode(Batches::Given(batches)).await?
            }
            None => {
                eprintln!(
                    "convergence: seed {} (KS_CONVERGENCE_SEED), generating for {} s (KS_CONVERGENCE_SECONDS)",
                    settings.seed, settings.seconds
                );
                let mut generator = Generator::new(settings.seed);
                let until = Instant::now() + Duration::from_secs(settings.seconds);
                let (mut episodes, mut operations) = (0, 0);
                loop {
                    let generated = Batches::Generated {
                        generator: &mut generator,
                        until,
                    };
                    let (batches, failure) = self.episode(generated).await?;
                    episodes += 1;
                    operations += batches.iter().map(Vec::len).sum::<usize>();
                    if failure.is_some() || Instant::now() >= until {
                        eprintln!(
                            "convergence: seed {}: {episodes} episodes, {operations} operations",
                            settings.seed
                        );
                        break (batches, failure);
                    }
                }
            }
        };
        let Some(failure) = failure else {
            eprintln!("convergence: every batch converged");
            return Ok(());
        };
        let operations = batches.iter().map(Vec::len).sum::<usize>();
        // A replay's failing part never overwrites the file it may have been read from.
        let part = if settings.ops.is_some() { "replayed" } else { "all" };
        let file = self.save(&format!("convergence-{}-{part}.json", settings.seed), &batches)?;
        eprintln!(
            "convergence: seed {} FAILED {failure}the episode's {operations} operations: {file}\nshrinking (at most {} replays)",
            settings.seed, settings.replays
        );
        let (shrunk, shrunk_failure, replays) = self.shrink(&batches, &failure, settings.replays).await;
        let inline = serde_json::to_string(&shrunk)?;
        let file = self.save(&format!("convergence-{}-shrunk.json", settings.seed), &shrunk)?;
        anyhow::bail!(
            "seed {}: {failure}shrunk in {replays} replays to {} operations ({file}), which fail {shrunk_failure}\
             run them again with:\n  KS_CONVERGENCE_SEED={} KS_CONVERGENCE_OPS='{inline}' cargo test -p ks-tests --test convergence",
            settings.seed,
            shrunk.iter().map(Vec::len).sum::<usize>(),
            settings.seed,
        )
    }

    fn save(&self, name: &str, batches: &[Vec<Op>]) -> anyhow::Result<String> {
        let path = self.ctx.stack.state.join("tmp").join(name);
        std::fs::create_dir_all(path.parent().context("a directory")?)?;
        let lines: Vec<String> = batches.iter().map(serde_json::to_string).collect::<Result<_, _>>()?;
        std::fs::write(&path, format!("[\n{}\n]\n", lines.join(",\n")))?;
        Ok(path.display().to_string())
    }

    /// The smallest part of `batches` found to fail as `failure` did (some difference of the
    /// same kind), from a clean state; its failure; the replays made.
    async fn shrink(&self, batches: &[Vec<Op>], failure: &Failure, replays: usize) -> (Vec<Vec<Op>>, Failure, usize) {
        let kinds = failure.kinds();
        // Up to the failing batch, each operation with its batch.
        let last = failure.batch.unwrap_or(batches.len());
        let tagged: Vec<(usize, Op)> = batches
            .iter()
            .take(last + 1)
            .enumerate()
            .flat_map(|(i, batch)| batch.iter().map(move |op| (i, op.clone())))
            .collect();
        let subject = |(_, op): &(usize, Op)| op.subject();
        let (shrunk, shrunk_failure, tries) = shrink::shrink(tagged, replays, subject, |tagged: Vec<(usize, Op)>| {
            let kinds = &kinds;
            async move {
                let batches = regroup(&tagged);
                match self.episode(Batches::Given(&batches)).await {
                    Ok((_, Some(f))) if !f.kinds().is_disjoint(kinds) => {
                        eprintln!("convergence: {} operations still fail", tagged.len());
                        Some(f)
                    }
                    Ok((_, Some(other))) => {
                        eprintln!("convergence: {} operations fail otherwise: {other}", tagged.len());
                        None
                    }
                    Ok((_, None)) => None,
                    Err(err) => {
                        eprintln!("convergence: a replay could not run: {err:#}");
                        None
                    }
                }
            }
        })
        .await;
        (
            regroup(&shrunk),
            shrunk_failure.unwrap_or_else(|| failure.clone()),
            tries,
        )
    }

    /// Runs an episode: a fresh set of names, its batches each followed by convergence, then
    /// its clean-up, which must converge too. Its batches, and how it failed if it did.
    async fn episode(&self, mut batches: Batches<'_>) -> anyhow::Result<(Vec<Vec<Op>>, Option<Failure>)> {
        let names = self.names();
        let mut episode = Episode {
            run: self,
            model: Model::new(names.clone(), self.wecs.clone()),
            history: History::default(),
        };
        let base = manifests::base_policy(&names);
        self.tools
            .kubectl_input(WDS, &["apply", "-f", "-"], &base.to_string())?;
        let mut done = Vec::new();
        let mut failure = None;
        while let Some(batch) = batches.next(done.len(), &episode.model) {
            let started = Instant::now();
            let differences = episode.batch(&batch).await?;
            eprintln!(
                "convergence: {} batch {}: {} operations, {} in {:.1} s",
                names.episode,
                done.len() + 1,
                batch.len(),
                if differences.is_empty() { "converged" } else { "FAILED" },
                started.elapsed().as_secs_f64()
            );
            done.push(batch);
            if !differences.is_empty() {
                failure = Some(Failure {
                    batch: Some(done.len() - 1),
                    differences,
                });
                break;
            }
        }
        if failure.is_some() && env("KS_CONVERGENCE_KEEP_FAILED").is_some() {
            eprintln!(
                "convergence: {} left as it failed (KS_CONVERGENCE_KEEP_FAILED): its objects, policies and \
                 ManifestWorks are named {}-…",
                names.episode, names.episode
            );
            return Ok((done, failure));
        }
        let cleaned = episode.clean_up().await?;
        if failure.is_none() && !cleaned.is_empty() {
            failure = Some(Failure {
                batch: None,
                differences: cleaned,
            });
        }
        Ok((done, failure))
    }
}

/// Batches again from operations tagged with their batch.
fn regroup(tagged: &[(usize, Op)]) -> Vec<Vec<Op>> {
    let mut batches: Vec<Vec<Op>> = Vec::new();
    let mut last = None;
    for (batch, op) in tagged {
        if last != Some(*batch) {
            batches.push(Vec::new());
            last = Some(*batch);
        }
        batches.last_mut().expect("a batch").push(op.clone());
    }
    batches
}

/// One episode under way.
struct Episode<'r, 'a> {
    run: &'r Run<'a>,
    model: Model,
    history: History,
}

impl Episode<'_, '_> {
    /// Carries out `batch` (skipping what cannot apply after shrinking), then waits for the stack
    /// to match the oracle; the differences left at the deadline.
    async fn batch(&mut self, batch: &[Op]) -> anyhow::Result<Vec<Difference>> {
        for op in batch {
            for write in self.model.writes(op) {
                let before = self.model.clone();
                if !self.model.apply(&write) {
                    continue;
                }
                if let Err(err) = drive::run(&self.run.tools, &before, &write) {
                    let detail = format!("{err:#}");
                    return Ok(vec![Difference {
                        what: "kubectl",
                        about: None,
                        detail,
                    }]);
                }
                self.history.note(&self.model.expected());
            }
        }
        self.converge().await
    }

    /// Waits until the stack matches the oracle and goes on matching for [`HOLD`]; the
    /// differences seen last if that does not happen within [`DEADLINE`].
    async fn converge(&mut self) -> anyhow::Result<Vec<Difference>> {
        let expected = self.model.expected();
        let foreign: Vec<(String, String)> = expected.foreign_works.keys().cloned().collect();
        let started = Instant::now();
        let mut matching_since: Option<Instant> = None;
        loop {
            let observed: Observed = observe::observe(&self.run.spaces, &self.model.names, &foreign).await?;
            let differences = check::differences(&expected, &observed, &self.history, &self.model.names.widgets);
            if !differences.is_empty() {
                matching_since = None;
                if started.elapsed() > DEADLINE {
                    return Ok(differences);
                }
            } else if matching_since.get_or_insert_with(Instant::now).elapsed() >= HOLD {
                self.history.converged(&expected, &observed);
                return Ok(Vec::new());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Removes what the episode made and waits until nothing of it is left: not in the WDS, not
    /// on the WECs, no WorkStatus, no ManifestWork.
    async fn clean_up(mut self) -> anyhow::Result<Vec<Difference>> {
        drive::clean_up(&self.run.tools, &self.model)?;
        self.model = Model::new(self.model.names.clone(), self.run.wecs.clone());
        self.history = History::default();
        let differences = self.converge().await?;
        if !differences.is_empty() {
            return Ok(differences);
        }
        let started = Instant::now();
        loop {
            let observed = observe::observe(&self.run.spaces, &self.model.names, &[]).await?;
            if observed.our_works.is_empty() {
                return Ok(Vec::new());
            }
            if started.elapsed() > DEADLINE {
                let detail = format!("ManifestWorks of the episode's policies left: {:?}", observed.our_works);
                return Ok(vec![Difference {
                    what: "cleanup",
                    about: None,
                    detail,
                }]);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
