//! `trace`: the latest rollout of an object, read from Jaeger's query API and drawn as a
//! waterfall in the terminal.

use std::collections::BTreeSet;

use anyhow::Context;
use ks_shared::rollout::attribute;
use serde_json::{Value, json};

/// Columns of the waterfall's bar.
const BAR: usize = 40;

/// The query that finds the rollout traces of an object: the hub's spans carry its resource and
/// name.
pub fn search_path(resource: &str, name: &str) -> String {
    let tags = json!({attribute::RESOURCE: resource, attribute::NAME: name}).to_string();
    format!(
        "/api/traces?service=ks-hub&limit=20&lookback=24h&tags={}",
        percent_encode(&tags)
    )
}

/// The newest of the traces Jaeger returned (`{"data": [trace, ...]}`) that are about an object in
/// `namespace` (empty: cluster-scoped).
pub fn newest(found: &Value, namespace: &str) -> Option<Value> {
    let about = |trace: &&Value| {
        spans(trace).iter().any(|s| {
            let tagged = tag(s, attribute::NAMESPACE);
            tagged.unwrap_or_default() == namespace
        })
    };
    found["data"]
        .as_array()?
        .iter()
        .filter(about)
        .max_by_key(|t| start(t))
        .cloned()
}

/// Reads `path` from Jaeger's query API at `endpoint` (e.g. http://127.0.0.1:16686).
pub async fn query(endpoint: &str, path: &str) -> anyhow::Result<Value> {
    let url: http::Uri = endpoint.parse().with_context(|| format!("{endpoint:?} is not a URL"))?;
    let client = kube::Client::try_from(kube::Config::new(url))?;
    let request = http::Request::get(path).body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .with_context(|| format!("cannot query Jaeger at {endpoint}"))?;
    serde_json::from_str(&text).with_context(|| format!("Jaeger at {endpoint} answered {text:.200}"))
}

/// The trace as text: a line per span, indented under its parent, with its service (and WEC), a
/// bar placing it in the trace's time, and when it started and how long it took.
pub fn waterfall(trace: &Value) -> Vec<String> {
    let spans = spans(trace);
    let begin = start(trace);
    let end = spans
        .iter()
        .map(|s| s["startTime"].as_i64().unwrap_or(0) + s["duration"].as_i64().unwrap_or(0))
        .max()
        .unwrap_or(begin);
    let total = (end - begin).max(1) as f64;
    let ids: BTreeSet<&str> = spans.iter().filter_map(|s| s["spanID"].as_str()).collect();
    let parent = |s: &Value| s["references"][0]["spanID"].as_str().map(str::to_string);
    // Roots are spans whose parent is not in the trace (e.g. a user's own span elsewhere).
    let mut pending: Vec<(&Value, usize)> = spans
        .iter()
        .filter(|s| parent(s).is_none_or(|p| !ids.contains(p.as_str())))
        .map(|s| (s, 0))
        .collect();
    pending.sort_by_key(|(s, _)| std::cmp::Reverse(s["startTime"].as_i64()));
    let mut rows = Vec::new();
    while let Some((span, depth)) = pending.pop() {
        let service = trace["processes"][span["processID"].as_str().unwrap_or_default()]["serviceName"]
            .as_str()
            .unwrap_or_default();
        let wec = tag(span, attribute::WEC).map(|w| format!(", {w}")).unwrap_or_default();
        let label = format!(
            "{:indent$}{} ({service}{wec})",
            "",
            span["operationName"].as_str().unwrap_or_default(),
            indent = depth * 2
        );
        // Jaeger's times are in microseconds.
        let at = span["startTime"].as_i64().unwrap_or(begin) - begin;
        let took = span["duration"].as_i64().unwrap_or(0);
        let from = ((at as f64 / total) * BAR as f64) as usize;
        let width = (((took as f64 / total) * BAR as f64).round() as usize).max(1);
        let bar: String = (0..BAR)
            .map(|i| if i >= from && i < from + width { '█' } else { '·' })
            .collect();
        rows.push((label, bar, at as f64 / 1000.0, took as f64 / 1000.0));
        let id = span["spanID"].as_str().map(str::to_string);
        let mut children: Vec<(&Value, usize)> = spans
            .iter()
            .filter(|s| parent(s) == id)
            .map(|s| (s, depth + 1))
            .collect();
        children.sort_by_key(|(s, _)| std::cmp::Reverse(s["startTime"].as_i64()));
        pending.extend(children);
    }
    let width = rows.iter().map(|(l, ..)| l.chars().count()).max().unwrap_or(0);
    rows.into_iter()
        .map(|(label, bar, at, took)| format!("{label:<width$}  {bar}  +{at:.0} ms, {took:.0} ms"))
        .collect()
}

/// The trace's id.
pub fn id(trace: &Value) -> &str {
    trace["traceID"].as_str().unwrap_or_default()
}

fn spans(trace: &Value) -> &[Value] {
    trace["spans"].as_array().map(Vec::as_slice).unwrap_or_default()
}

fn start(trace: &Value) -> i64 {
    spans(trace)
        .iter()
        .filter_map(|s| s["startTime"].as_i64())
        .min()
        .unwrap_or(0)
}

fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .and_then(|t| t["value"].as_str())
}

/// Percent-encoding for a query parameter (RFC 3986 unreserved characters stay).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: &str, parent: Option<&str>, operation: &str, start: i64, duration: i64, tags: Value) -> Value {
        let references = parent.map_or(json!([]), |p| json!([{"refType": "CHILD_OF", "spanID": p}]));
        json!({"spanID": id, "operationName": operation, "startTime": start, "duration": duration,
               "processID": "p1", "references": references, "tags": tags})
    }

    fn trace() -> Value {
        let object = json!([{"key": "k8s.object.namespace", "value": "shop"}]);
        json!({
            "traceID": "0af7651916cd43dd8448eb211c80319c",
            "processes": {"p1": {"serviceName": "ks-hub"}},
            "spans": [
                span("b", Some("a"), "delivery", 1_004_000, 6_000, json!([{"key": "kubestellar.wec", "value": "cluster1"}])),
                span("a", None, "packaging", 1_000_000, 4_000, object),
            ],
        })
    }

    #[test]
    fn the_waterfall_nests_children_and_places_them_in_time() {
        let lines = waterfall(&trace());
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("packaging (ks-hub)"), "{lines:?}");
        assert!(
            lines[0].contains(&format!("{}{}", "█".repeat(16), "·".repeat(24))),
            "{lines:?}"
        );
        assert!(lines[0].ends_with("+0 ms, 4 ms"), "{lines:?}");
        assert!(lines[1].starts_with("  delivery (ks-hub, cluster1)"), "{lines:?}");
        assert!(
            lines[1].contains(&format!("{}{}", "·".repeat(16), "█".repeat(24))),
            "{lines:?}"
        );
        assert!(lines[1].ends_with("+4 ms, 6 ms"), "{lines:?}");
    }

    #[test]
    fn the_newest_trace_of_the_namespace_is_chosen() {
        let mut older = trace();
        older["spans"][1]["startTime"] = json!(10);
        older["traceID"] = json!("older");
        let mut elsewhere = trace();
        elsewhere["spans"][1]["tags"][0]["value"] = json!("other");
        elsewhere["spans"][1]["startTime"] = json!(9_000_000);
        let found = json!({"data": [older, trace(), elsewhere]});
        assert_eq!(id(&newest(&found, "shop").unwrap()), "0af7651916cd43dd8448eb211c80319c");
        assert!(newest(&found, "nowhere").is_none());
    }

    #[test]
    fn the_search_encodes_its_tags() {
        let path = search_path("deployments", "web");
        assert!(path.starts_with("/api/traces?service=ks-hub&"), "{path}");
        assert!(
            path.ends_with(
                "tags=%7B%22k8s.object.name%22%3A%22web%22%2C%22k8s.object.resource%22%3A%22deployments%22%7D"
            ),
            "{path}"
        );
    }
}
