//! StatusCollector evaluations in a process of their own (`ks-hub cel-worker`). Each evaluation
//! is estimated before it runs and refused beyond its budget (`collector::estimate`); the worker
//! is for what the estimate cannot see, a defect in it or in the third-party evaluator: there a
//! runaway costs the worker, not the hub. The worker may hold at most its memory limit of data
//! (`RLIMIT_DATA`: an allocation beyond it ends the worker) and must answer each request within
//! the deadline, or it is killed; either way the evaluation is an error for the collectors
//! involved, and the next request starts a new worker.
//!
//! One request or answer is one line of JSON on the worker's standard input or output.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{AggregationError, NamedStatusCombination, StatusCollectorSpec, StatusDetails};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::collector::{CEL_STACK, Collector, WecReport, combine};

/// The signal a process ends with when an allocation fails.
const SIGABRT: i32 = 6;

/// The argument that makes `ks-hub` a worker.
pub const WORKER_COMMAND: &str = "cel-worker";

/// What the worker is asked: [`combine`]'s inputs, the collectors as specs.
#[derive(Debug, Deserialize, Serialize)]
pub struct Request {
    pub collectors: Vec<(String, StatusCollectorSpec)>,
    pub object: Json,
    pub reports: Vec<Report>,
}

/// A [`WecReport`] that owns what it says.
#[derive(Debug, Deserialize, Serialize)]
pub struct Report {
    pub wec: String,
    pub status: Option<Json>,
    pub last_returned_update: Option<Time>,
    pub details: Option<StatusDetails>,
}

impl Request {
    pub fn new(collectors: &[&Collector], object: &Json, reports: &[WecReport]) -> Request {
        Request {
            collectors: collectors
                .iter()
                .map(|c| (c.name().to_string(), c.spec().clone()))
                .collect(),
            object: object.clone(),
            reports: reports
                .iter()
                .map(|r| Report {
                    wec: r.wec.to_string(),
                    status: r.status.cloned(),
                    last_returned_update: r.last_returned_update.cloned(),
                    details: r.details.cloned(),
                })
                .collect(),
        }
    }

    /// Its answer, computed here. A collector that does not compile here (the parent compiled it,
    /// so only for want of a thread or memory) answers with that error, never with nothing: a
    /// result left out would empty its part of the CombinedStatus.
    fn answer(&self) -> Vec<NamedStatusCombination> {
        let mut compiled = Vec::new();
        let mut failed = Vec::new();
        for (name, spec) in &self.collectors {
            match Collector::new(name, spec) {
                Ok(collector) => compiled.push(collector),
                Err(errors) => failed.push(failure(name, &errors.join("; "))),
            }
        }
        let collectors: Vec<&Collector> = compiled.iter().collect();
        let reports: Vec<WecReport> = self
            .reports
            .iter()
            .map(|r| WecReport {
                wec: &r.wec,
                status: r.status.as_ref(),
                last_returned_update: r.last_returned_update.as_ref(),
                details: r.details.as_ref(),
            })
            .collect();
        let mut answer = combine(&collectors, &self.object, &reports);
        answer.extend(failed);
        answer.sort_by(|a, b| a.name.cmp(&b.name));
        answer.dedup_by(|a, b| a.name == b.name);
        answer
    }

    /// The answer when the evaluation failed: each collector's result says why.
    fn failed(&self, why: &str) -> Vec<NamedStatusCombination> {
        let mut names: Vec<&str> = self.collectors.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.into_iter().map(|name| failure(name, why)).collect()
    }
}

/// A collector's result that is only the error of its whole evaluation.
fn failure(name: &str, why: &str) -> NamedStatusCombination {
    NamedStatusCombination {
        name: name.to_string(),
        aggregation_errors: vec![AggregationError {
            column_name: String::new(),
            error: why.to_string(),
        }],
        ..Default::default()
    }
}

/// Serves requests from standard input until it closes, holding at most `memory` bytes of data
/// besides the stacks of its two CEL threads: the evaluator's, on which it runs, and the
/// parser's, which compiling an expression starts.
pub fn serve(memory: u64) -> anyhow::Result<()> {
    let limit = memory.saturating_add(2 * CEL_STACK as u64);
    rlimit::setrlimit(rlimit::Resource::DATA, limit, limit).context("limiting the worker's memory")?;
    let serving = std::thread::Builder::new()
        .name("cel-worker".into())
        .stack_size(CEL_STACK)
        .spawn(|| -> anyhow::Result<()> {
            let mut output = std::io::stdout().lock();
            for line in std::io::stdin().lock().lines() {
                let request: Request = serde_json::from_str(&line?).context("reading a request")?;
                serde_json::to_writer(&mut output, &request.answer())?;
                output.write_all(b"\n")?;
                output.flush()?;
            }
            Ok(())
        })?;
    serving.join().map_err(|_| anyhow::anyhow!("the CEL worker failed"))?
}

/// The limits of a worker.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The most data it may hold, in bytes.
    pub memory: u64,
    /// How long it may take to answer one request.
    pub deadline: Duration,
}

/// Why an evaluation got no answer from the worker: the machine's fault, not the expression's.
#[derive(Debug, thiserror::Error)]
#[error("StatusCollectors cannot be evaluated now: {0}")]
pub struct Unavailable(String);

/// How asking the worker failed.
enum Failed {
    /// The evaluation needed more memory or time than the worker has.
    Expression(String),
    /// The worker could not be started, or ended or answered otherwise.
    Worker(String),
}

/// Evaluations in a worker process, started when first needed and again after one failed.
/// Clones share the worker.
#[derive(Clone, Debug)]
pub struct Sandbox {
    program: PathBuf,
    limits: Limits,
    worker: Arc<Mutex<Option<Worker>>>,
}

/// A running worker, and the lines it answers, read on a thread of their own so that waiting for
/// one can have a deadline. Dropped, it is ended.
#[derive(Debug)]
struct Worker {
    child: Child,
    input: ChildStdin,
    answers: Receiver<String>,
}

impl Sandbox {
    /// Workers run `program` (this hub's own executable).
    pub fn new(program: PathBuf, limits: Limits) -> Sandbox {
        Sandbox {
            program,
            limits,
            worker: Arc::default(),
        }
    }

    /// Evaluates in the worker; blocks until it answers, fails or runs out of time. An
    /// evaluation that ran out of the worker's memory or time is each collector's error (the
    /// expression's doing), said in the hub's log too. A worker that could not be started, or
    /// ended or answered otherwise, is [`Unavailable`]: the caller writes nothing from it and
    /// tries again, rather than empty every CombinedStatus for a fault of the machine.
    pub fn evaluate(&self, request: &Request) -> Result<Vec<NamedStatusCombination>, Unavailable> {
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        let asked = self.ask(&mut worker, request);
        if asked.is_err() {
            *worker = None;
        }
        match asked {
            Ok(answer) => Ok(answer),
            Err(Failed::Expression(why)) => {
                tracing::warn!(error = %why, "a StatusCollector evaluation failed in its worker");
                Ok(request.failed(&why))
            }
            Err(Failed::Worker(why)) => Err(Unavailable(why)),
        }
    }

    fn ask(&self, worker: &mut Option<Worker>, request: &Request) -> Result<Vec<NamedStatusCombination>, Failed> {
        if worker.is_none() {
            let started = self
                .start()
                .map_err(|e| Failed::Worker(format!("no CEL worker: {e:#}")))?;
            *worker = Some(started);
        }
        let running = worker.as_mut().expect("started above");
        let mut line = serde_json::to_vec(request).map_err(|e| Failed::Worker(e.to_string()))?;
        line.push(b'\n');
        let sent = running.input.write_all(&line).and_then(|()| running.input.flush());
        let answer = match sent.map(|()| running.answers.recv_timeout(self.limits.deadline)) {
            Ok(Ok(answer)) => answer,
            Ok(Err(RecvTimeoutError::Timeout)) => {
                return Err(Failed::Expression(format!(
                    "the evaluation took longer than {} s and was stopped",
                    self.limits.deadline.as_secs_f64()
                )));
            }
            Ok(Err(RecvTimeoutError::Disconnected)) | Err(_) => {
                let status = running.child.wait().ok();
                let shown = status.map(|s| s.to_string()).unwrap_or_default();
                // An allocation refused by the limit aborts the process.
                if status.and_then(|s| s.signal()) == Some(SIGABRT) {
                    return Err(Failed::Expression(format!(
                        "the evaluation ended its worker ({shown}): it needed more than the {} MiB it may hold",
                        self.limits.memory >> 20
                    )));
                }
                return Err(Failed::Worker(format!("the CEL worker ended ({shown})")));
            }
        };
        serde_json::from_str(&answer).map_err(|e| Failed::Worker(format!("the CEL worker's answer: {e}")))
    }

    fn start(&self) -> anyhow::Result<Worker> {
        let mut child = Command::new(&self.program)
            .args([WORKER_COMMAND, &self.limits.memory.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        let input = child.stdin.take().context("the worker's input")?;
        let output = BufReader::new(child.stdout.take().context("the worker's output")?);
        let (answered, answers) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("cel-answers".into()).spawn(move || {
            for line in output.lines().map_while(Result::ok) {
                if answered.send(line).is_err() {
                    break;
                }
            }
        })?;
        Ok(Worker { child, input, answers })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use ks_shared::api::NamedExpression;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_collector_the_worker_cannot_compile_answers_with_its_error() {
        let select = |def: &str| StatusCollectorSpec {
            select: vec![NamedExpression {
                name: "c".into(),
                def: def.into(),
            }],
            ..Default::default()
        };
        let request = Request {
            collectors: vec![("bad".into(), select("1 +")), ("good".into(), select("1"))],
            object: json!({}),
            reports: vec![],
        };
        let answer = request.answer();
        let names: Vec<&str> = answer.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["bad", "good"]);
        let error = &answer[0].aggregation_errors[0].error;
        assert!(
            error.starts_with("select expression (c) invalid: failed to parse expression"),
            "{error}"
        );
        assert!(answer[1].aggregation_errors.is_empty());
    }
}
