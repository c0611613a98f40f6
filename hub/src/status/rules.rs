//! HealthRules: a user's CEL checks for one kind. A rule is compiled into a StatusCollector
//! that selects one row per WEC (the WEC, the verdict, the reason), so that it is evaluated
//! like StatusCollectors are: estimated and held to the same budget, in the same worker
//! process, on the same variables (`returned.status`, `obj`, `inventory.name`).

use std::collections::BTreeMap;

use ks_shared::api::{Health, HealthRuleSpec, NamedExpression, NamedStatusCombination, StatusCollectorSpec, Verdict};
use ks_shared::health::bounded_reason;

use serde_json::{Map, Value as Json};

use super::collector::{Collector, WecReport, check_expression};

const WEC: &str = "wec";
const VERDICT: &str = "verdict";
const REASON: &str = "reason";

/// One compiled HealthRule.
pub struct Rule {
    name: String,
    collector: Collector,
}

/// `text` as a CEL string literal.
fn literal(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

impl Rule {
    /// Compiles the rule `name`; every problem found, each naming its field, when it does not.
    pub fn compile(name: &str, spec: &HealthRuleSpec) -> Result<Rule, Vec<String>> {
        let mut errors = Vec::new();
        if spec.kind.is_empty() {
            errors.push("spec.kind is empty".to_string());
        }
        for (i, check) in spec.checks.iter().enumerate() {
            if let Err(err) = check_expression(&check.when) {
                errors.push(format!("spec.checks[{i}].when invalid: {err}"));
            }
            if let Some(Err(err)) = check.reason.as_deref().map(check_expression) {
                errors.push(format!("spec.checks[{i}].reason invalid: {err}"));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        // The checks as one conditional each for the verdict and the reason, the first check
        // outermost: `(when0) ? v0 : ((when1) ? v1 : otherwise)`.
        let mut verdict = literal(spec.otherwise.as_str());
        let mut reason = literal(&format!("HealthRule {name}: no check holds"));
        for (i, check) in spec.checks.iter().enumerate().rev() {
            // Without a reason of its own, a check names itself, but a healthy one needs none.
            let said = check.reason.clone().unwrap_or_else(|| match check.verdict {
                Verdict::Healthy => literal(""),
                _ => literal(&format!("HealthRule {name}, checks[{i}]")),
            });
            verdict = format!("({}) ? {} : ({verdict})", check.when, literal(check.verdict.as_str()));
            reason = format!("({}) ? ({said}) : ({reason})", check.when);
        }
        let column = |name: &str, def: String| NamedExpression {
            name: name.to_string(),
            def,
        };
        let spec = StatusCollectorSpec {
            select: vec![
                column(WEC, "inventory.name".into()),
                column(VERDICT, verdict),
                column(REASON, reason),
            ],
            ..Default::default()
        };
        let collector = Collector::new(name, &spec)?;
        Ok(Rule {
            name: name.to_string(),
            collector,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rule's verdict on each WEC of `reports`, evaluated by `evaluate` (given the rule's
    /// collector: the hub's worker process, or [`super::collector::combine`] in place). A WEC
    /// that has reported no status yet is judged as with an empty one, as the built-in rules
    /// judge it.
    pub fn judge<E>(
        &self,
        reports: &[WecReport],
        evaluate: impl FnOnce(&[&Collector], &[WecReport]) -> Result<Vec<NamedStatusCombination>, E>,
    ) -> Result<BTreeMap<String, Health>, E> {
        let empty = Json::Object(Map::new());
        let filled: Vec<WecReport> = reports
            .iter()
            .map(|r| WecReport {
                status: r.status.or(Some(&empty)),
                ..*r
            })
            .collect();
        let results = evaluate(&[&self.collector], &filled)?;
        let wecs: Vec<&str> = reports.iter().map(|r| r.wec).collect();
        Ok(self.verdicts(results.first(), &wecs))
    }

    /// The verdict on each of `wecs` from the rule's evaluation `result`: a WEC whose row failed,
    /// or is missing (the whole evaluation failed), is `Unknown` with the error.
    fn verdicts(&self, result: Option<&NamedStatusCombination>, wecs: &[&str]) -> BTreeMap<String, Health> {
        let result = result.cloned().unwrap_or_default();
        let unknown = |why: &str| Health {
            verdict: Verdict::Unknown,
            reason: bounded_reason(format!("HealthRule {}: {why}", self.name)),
        };
        let text = |cell: Option<&ks_shared::api::Value>| cell.and_then(|c| c.string.clone()).unwrap_or_default();
        let mut verdicts: BTreeMap<String, Health> = BTreeMap::new();
        for row in &result.rows {
            let (wec, verdict, reason) = (
                text(row.columns.first()),
                text(row.columns.get(1)),
                text(row.columns.get(2)),
            );
            // A value that is no verdict is said as Unknown, never taken for another.
            let health = match serde_json::from_value::<Verdict>(serde_json::Value::String(verdict.clone())) {
                Ok(verdict) => Health {
                    verdict,
                    reason: bounded_reason(reason),
                },
                Err(_) => unknown(&format!("{verdict:?} is no verdict")),
            };
            verdicts.insert(wec, health);
        }
        for error in &result.row_errors {
            let said = format!("{}: {}", error.column_name, error.error);
            verdicts.insert(error.wec.cluster_id.clone(), unknown(&said));
        }
        let whole = result
            .aggregation_errors
            .iter()
            .map(|e| e.error.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        for wec in wecs {
            verdicts
                .entry(wec.to_string())
                .or_insert_with(|| unknown(if whole.is_empty() { "no verdict" } else { &whole }));
        }
        verdicts
    }
}

/// The HealthRules as last compiled, by name: the one judging a kind is the first by name; a
/// later one for the same kind is an error in its status.
#[derive(Default)]
pub struct Rules {
    compiled: BTreeMap<String, Compiled>,
}

struct Compiled {
    generation: Option<i64>,
    kind: (String, String),
    rule: Result<Rule, Vec<String>>,
}

impl Rules {
    /// Takes the rule `name` as now (`None`: deleted) at `generation`; returns the kinds whose
    /// rule may have changed (none when its generation is the one compiled).
    pub fn set(&mut self, name: &str, generation: Option<i64>, spec: Option<&HealthRuleSpec>) -> Vec<(String, String)> {
        let before = self.compiled.get(name);
        if let (Some(before), Some(_)) = (before, spec)
            && before.generation == generation
        {
            return Vec::new();
        }
        let mut kinds: Vec<(String, String)> = before.map(|b| b.kind.clone()).into_iter().collect();
        match spec {
            Some(spec) => {
                let kind = (spec.group.clone(), spec.kind.clone());
                kinds.push(kind.clone());
                let compiled = Compiled {
                    generation,
                    kind,
                    rule: Rule::compile(name, spec),
                };
                self.compiled.insert(name.to_string(), compiled);
            }
            None => {
                self.compiled.remove(name);
            }
        }
        kinds.dedup();
        kinds
    }

    /// The names of the rules known.
    pub fn names(&self) -> Vec<String> {
        self.compiled.keys().cloned().collect()
    }

    /// The rule judging objects of `group`/`kind`: the first valid one by name.
    pub fn for_kind(&self, group: &str, kind: &str) -> Option<&Rule> {
        self.compiled
            .values()
            .filter(|c| c.kind.0 == group && c.kind.1 == kind)
            .find_map(|c| c.rule.as_ref().ok())
    }

    /// The problems of the rule `name`, for its status.
    pub fn errors(&self, name: &str) -> Vec<String> {
        let Some(compiled) = self.compiled.get(name) else {
            return Vec::new();
        };
        let mut errors = compiled.rule.as_ref().err().cloned().unwrap_or_default();
        let (group, kind) = &compiled.kind;
        if let Some(first) = self.for_kind(group, kind).map(Rule::name)
            && compiled.rule.is_ok()
            && first != name
        {
            errors.push(format!(
                "HealthRule {first} judges {kind} in group {group:?} already: this one is not used"
            ));
        }
        errors
    }
}

#[cfg(test)]
mod tests;
