//! A BindingPolicy with its selectors validated once, so that evaluating it against each of many
//! objects and WECs is cheap, and every invalid selector becomes an error for the policy's status
//! instead of being skipped silently as upstream does.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use ks_shared::api::{BindingPolicySpec, DownsyncModulation, DownsyncPolicyClause};
use ks_shared::selector::{Selector, SelectorError};

use super::workload::Labels;

/// A problem in a BindingPolicy's spec, worded for its `status.errors`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A selector of a downsync clause; `list` is `objectSelectors` or `namespaceSelectors`.
    #[error("spec.downsync[{clause}].{list}[{index}] is invalid and selects nothing: {source}")]
    InvalidClauseSelector {
        clause: usize,
        list: &'static str,
        index: usize,
        source: SelectorError,
    },
    #[error("spec.clusterSelectors[{index}] is invalid and selects nothing: {source}")]
    InvalidClusterSelector { index: usize, source: SelectorError },
}

/// A BindingPolicy ready for evaluation, with the errors found while validating it.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    clauses: Vec<CompiledClause>,
    cluster_selectors: Vec<Selector>,
    errors: Vec<PolicyError>,
}

impl CompiledPolicy {
    pub fn new(spec: &BindingPolicySpec) -> Self {
        let mut errors = Vec::new();
        let clauses = spec
            .downsync
            .iter()
            .enumerate()
            .map(|(index, clause)| CompiledClause::new(index, clause, &mut errors))
            .collect();
        let cluster_selectors = valid_selectors(&spec.cluster_selectors, |index, source| {
            errors.push(PolicyError::InvalidClusterSelector { index, source })
        });
        CompiledPolicy {
            clauses,
            cluster_selectors,
            errors,
        }
    }

    /// The downsync clauses, in spec order.
    pub fn clauses(&self) -> &[CompiledClause] {
        &self.clauses
    }

    /// The valid cluster selectors; invalid ones are in [`Self::errors`].
    pub(super) fn cluster_selectors(&self) -> &[Selector] {
        &self.cluster_selectors
    }

    /// Every invalid selector of the spec, in spec order.
    pub fn errors(&self) -> &[PolicyError] {
        &self.errors
    }

    /// Whether some clause may select objects of `resource` of `group` (their other criteria
    /// looked at per object).
    pub fn may_select(&self, group: &str, resource: &str) -> bool {
        self.clauses
            .iter()
            .any(|c| c.api_group.as_ref().is_none_or(|g| g == group) && c.resources.admits(resource))
    }
}

/// One downsync clause: the test an object must pass, and the modulation it then gets.
#[derive(Debug, Clone)]
pub struct CompiledClause {
    pub(super) api_group: Option<String>,
    pub(super) resources: NameCriterion,
    pub(super) namespaces: NameCriterion,
    pub(super) object_names: NameCriterion,
    pub(super) object_selectors: LabelCriterion,
    pub(super) namespace_selectors: LabelCriterion,
    pub modulation: DownsyncModulation,
}

impl CompiledClause {
    fn new(clause_index: usize, clause: &DownsyncPolicyClause, errors: &mut Vec<PolicyError>) -> Self {
        let test = &clause.test;
        let mut criterion = |list, selectors| {
            LabelCriterion::new(selectors, |index, source| {
                errors.push(PolicyError::InvalidClauseSelector {
                    clause: clause_index,
                    list,
                    index,
                    source,
                })
            })
        };
        CompiledClause {
            api_group: test.api_group.clone(),
            resources: NameCriterion::new(&test.resources),
            namespaces: NameCriterion::new(&test.namespaces),
            object_names: NameCriterion::new(&test.object_names),
            object_selectors: criterion("objectSelectors", &test.object_selectors),
            namespace_selectors: criterion("namespaceSelectors", &test.namespace_selectors),
            modulation: clause.modulation.clone(),
        }
    }
}

/// A clause's list of acceptable resources, namespaces or object names.
#[derive(Debug, Clone)]
pub(super) enum NameCriterion {
    /// The list was empty or contained `"*"`.
    Everything,
    OneOf(BTreeSet<String>),
}

impl NameCriterion {
    fn new(names: &[String]) -> Self {
        if names.is_empty() || names.iter().any(|name| name == "*") {
            NameCriterion::Everything
        } else {
            NameCriterion::OneOf(names.iter().cloned().collect())
        }
    }

    /// A cluster-scoped object's namespace is `""`, so it passes a namespace list only through
    /// `Everything` or a literal `""` entry, as upstream does.
    pub(super) fn admits(&self, name: &str) -> bool {
        match self {
            NameCriterion::Everything => true,
            NameCriterion::OneOf(names) => names.contains(name),
        }
    }

    /// Whether the list holds `name` itself (not through `"*"` or by being empty).
    pub(super) fn names(&self, name: &str) -> bool {
        matches!(self, NameCriterion::OneOf(names) if names.contains(name))
    }
}

/// A clause's list of label selectors, for the object's labels or its Namespace's labels.
#[derive(Debug, Clone)]
pub(super) enum LabelCriterion {
    /// The list was empty or held a `{}` selector.
    Everything,
    /// Some valid selector must match; none left (all invalid) means nothing passes.
    AnyOf(Vec<Selector>),
}

impl LabelCriterion {
    fn new(selectors: &[LabelSelector], report: impl FnMut(usize, SelectorError)) -> Self {
        let valid = valid_selectors(selectors, report);
        // A `{}` selector passes even when there are no labels to look at: upstream lets a `{}`
        // namespaceSelector admit cluster-scoped objects and objects in unknown namespaces.
        if selectors.is_empty() || valid.iter().any(Selector::is_everything) {
            LabelCriterion::Everything
        } else {
            LabelCriterion::AnyOf(valid)
        }
    }

    /// `labels` is `None` when there is nothing to look at (an unknown Namespace, or none).
    pub(super) fn admits(&self, labels: Option<&Labels>) -> bool {
        match self {
            LabelCriterion::Everything => true,
            LabelCriterion::AnyOf(selectors) => {
                labels.is_some_and(|labels| selectors.iter().any(|s| s.matches(labels)))
            }
        }
    }
}

/// The valid selectors, in order; each invalid one goes to `report` with its index instead.
fn valid_selectors(selectors: &[LabelSelector], mut report: impl FnMut(usize, SelectorError)) -> Vec<Selector> {
    selectors
        .iter()
        .enumerate()
        .filter_map(|(index, selector)| Selector::try_from(selector).map_err(|e| report(index, e)).ok())
        .collect()
}
