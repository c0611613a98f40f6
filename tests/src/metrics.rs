//! Reading Prometheus text: the apiservers' own request counts (the honest count of what every
//! client wrote) and single samples from our processes' `/metrics`.

use std::collections::BTreeMap;

use kube::Client;

/// Which requests a count is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub resource: String,
    pub subresource: String,
    pub verb: String,
}

/// Verbs that change stored objects (`APPLY` is server-side apply).
const WRITE_VERBS: [&str; 6] = ["POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"];

/// Completed write requests an apiserver has served since it started, by resource, subresource
/// and verb, from its `apiserver_request_total`.
pub async fn apiserver_writes(client: &Client) -> anyhow::Result<BTreeMap<Request, u64>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    Ok(writes_in(&text))
}

/// The write counts in an apiserver's metrics text.
pub fn writes_in(text: &str) -> BTreeMap<Request, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let labels = labels_of(labels);
        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
        let verb = label("verb");
        if !WRITE_VERBS.contains(&verb.as_str()) {
            continue;
        }
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let key = Request {
            resource: label("resource"),
            subresource: label("subresource"),
            verb,
        };
        // One series per response code (and more labels): sum them.
        *counts.entry(key).or_insert(0) += value as u64;
    }
    counts
}

/// `after - before`, without the entries that did not change.
pub fn difference(before: &BTreeMap<Request, u64>, after: &BTreeMap<Request, u64>) -> BTreeMap<Request, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0).min(*v)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Sum of the counts for one resource (optionally one subresource: `Some("")` is the main one).
pub fn total(counts: &BTreeMap<Request, u64>, resource: &str, subresource: Option<&str>) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| k.resource == resource && subresource.is_none_or(|s| k.subresource == s))
        .map(|(_, v)| v)
        .sum()
}

/// `name="value",...` as a map; values may hold escaped quotes and commas.
fn labels_of(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}

/// The value of an unlabelled sample (`name value`) in Prometheus text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The sum of every series of `name` (with any labels) in Prometheus text; 0 when absent.
pub fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.rsplit_once('}')?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse::<f64>().ok()
        })
        // Not `sum()`: an empty f64 sum is -0.0.
        .fold(0.0, |sum, v| sum + v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="work.open-cluster-management.io",resource="manifestworks",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="work.open-cluster-management.io",resource="manifestworks",scope="resource",subresource="",verb="APPLY",version="v1"} 2
apiserver_request_total{code="409",component="apiserver",dry_run="",group="work.open-cluster-management.io",resource="manifestworks",scope="resource",subresource="",verb="APPLY",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="work.open-cluster-management.io",resource="manifestworks",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="work.open-cluster-management.io",resource="manifestworks",scope="cluster",subresource="",verb="LIST",version="v1"} 9
kubestellar_agent_queue_depth 0
kubestellar_agent_queue_depth_other{a="b"} 5
"#;

    #[test]
    fn writes_are_summed_over_codes_and_reads_are_left_out() {
        let counts = writes_in(TEXT);
        assert_eq!(total(&counts, "manifestworks", Some("")), 6);
        assert_eq!(total(&counts, "manifestworks", Some("status")), 4);
        assert_eq!(total(&counts, "manifestworks", None), 10);
        assert_eq!(counts.len(), 3);
    }

    #[test]
    fn difference_keeps_only_changes() {
        let before = writes_in(TEXT);
        let mut after = before.clone();
        let post = Request {
            resource: "manifestworks".into(),
            subresource: String::new(),
            verb: "POST".into(),
        };
        *after.get_mut(&post).unwrap() += 2;
        assert_eq!(difference(&before, &after), BTreeMap::from([(post, 2)]));
    }

    #[test]
    fn labels_with_escapes() {
        let labels = labels_of(r#"a="x\"y,z",b="""#);
        assert_eq!(labels["a"], "x\"y,z");
        assert_eq!(labels["b"], "");
    }

    #[test]
    fn sums_over_label_sets() {
        assert_eq!(sum(TEXT, "kubestellar_agent_queue_depth"), 0.0);
        assert_eq!(sum(TEXT, "kubestellar_agent_queue_depth_other"), 5.0);
        assert_eq!(sum(TEXT, "kubestellar_agent_missing"), 0.0);
    }

    #[test]
    fn samples_by_exact_name() {
        assert_eq!(sample(TEXT, "kubestellar_agent_queue_depth"), Some(0.0));
        assert_eq!(sample(TEXT, "kubestellar_agent_queue"), None);
    }
}
