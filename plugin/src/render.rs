//! What the commands print: aligned tables for people, JSON or YAML for programs.

use serde::Serialize;
use serde_json::Value;

use crate::Output;
use crate::explain::Explanation;
use crate::rollout::WecRollout;

/// `value` in the chosen format; `text` draws it for people (as a table, wide, or names).
pub fn output(format: Output, value: &impl Serialize, text: impl FnOnce() -> String) -> anyhow::Result<String> {
    Ok(match format {
        Output::Table | Output::Wide | Output::Name => text(),
        Output::Json => serde_json::to_string_pretty(value)? + "\n",
        Output::Yaml => serde_saphyr::to_string(value)?,
    })
}

/// Rows, under `headers` if `with_headers`, each column as wide as its widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>], with_headers: bool) -> String {
    // Without headers, only the cells count (as kubectl --no-headers aligns them).
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|h| if with_headers { h.chars().count() } else { 0 })
        .collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("   ").trim_end().to_string() + "\n"
    };
    let mut text = if with_headers {
        line(headers.to_vec())
    } else {
        String::new()
    };
    for row in rows {
        text += &line(row.iter().map(String::as_str).collect());
    }
    text
}

/// `why`'s answer: the policies, the WECs, and the verdict.
pub fn explanation(found: &Explanation, typed: &str, namespace: &str) -> String {
    let mut text = format!("OBJECT  {}\n", found.object);
    if found.in_wds {
        text += "\nPOLICIES\n";
        if found.policies.is_empty() {
            text += "  (none in the WDS)\n";
        }
        let width = found
            .policies
            .iter()
            .map(|p| p.policy.chars().count())
            .max()
            .unwrap_or(0);
        for policy in &found.policies {
            let verdict = if policy.matching_clauses.is_empty() {
                match &policy.nearest_miss {
                    Some(miss) => format!("✗ no: downsync[{}] fails {}", miss.clause, miss.failed.join(", ")),
                    None => "✗ no: it has no downsync clauses".into(),
                }
            } else {
                let clauses: Vec<String> = policy
                    .matching_clauses
                    .iter()
                    .map(|c| format!("downsync[{c}]"))
                    .collect();
                let wecs = if policy.wecs.is_empty() {
                    "no WEC".to_string()
                } else {
                    policy.wecs.join(", ")
                };
                let bound = if policy.in_binding {
                    "in its Binding"
                } else {
                    "not in its Binding"
                };
                format!("✓ selects it by {}; WECs: {wecs}; {bound}", clauses.join(", "))
            };
            text += &format!("  {:<width$}  {verdict}\n", policy.policy);
            for error in &policy.errors {
                text += &format!("      error: {error}\n");
            }
        }
        let rows: Vec<Vec<String>> = found
            .wecs
            .iter()
            .map(|w| {
                let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
                let generation = match (w.reported_generation, w.content_current) {
                    (_, Some(true)) => Some("current content".to_string()),
                    (_, Some(false)) => Some("earlier content".to_string()),
                    (Some(g), None) => Some(match w.generation_applied {
                        Some(false) => format!("{g} (not applied)"),
                        _ => g.to_string(),
                    }),
                    (None, None) => None,
                };
                vec![
                    w.wec.clone(),
                    if w.chosen_by.is_empty() {
                        "(not chosen)".into()
                    } else {
                        w.chosen_by.join(",")
                    },
                    or_dash((!w.manifest_works.is_empty()).then(|| w.manifest_works.join(","))),
                    or_dash(w.applied.clone()),
                    or_dash(w.available.clone()),
                    or_dash(generation),
                    or_dash(w.work_status.clone()),
                    or_dash(w.health.as_ref().map(|h| h.verdict.to_string())),
                ]
            })
            .collect();
        text += "\n";
        text += &table(
            &[
                "WEC",
                "CHOSEN BY",
                "MANIFESTWORK",
                "APPLIED",
                "AVAILABLE",
                "GENERATION",
                "WORKSTATUS",
                "HEALTH",
            ],
            &rows,
            true,
        );
        for wec in &found.wecs {
            if let Some(why) = &wec.not_chosen {
                text += &format!("  {} not chosen: {why}\n", wec.wec);
            }
        }
        if let Some(rule) = &found.health_rule {
            text += &format!("  HEALTH as HealthRule {rule} judges it\n");
        }
        text += &format!(
            "\nSTATUS IN WDS  {}\n",
            found.status_in_wds.as_deref().unwrap_or("none")
        );
        if let Some(id) = &found.trace_id {
            text += &format!("TRACE          {id}  (kubectl kubestellar trace {typed} -n {namespace})\n");
        }
    }
    text += &match &found.broken {
        None => "\n✓ every link holds\n".to_string(),
        Some(broken) => format!(
            "\n✗ BROKEN LINK: {}{}\n  {}\n  → {}\n",
            broken.link,
            broken.wec.as_ref().map(|w| format!(" on {w}")).unwrap_or_default(),
            broken.problem,
            broken.fix
        ),
    };
    text
}

/// `status`'s table, under its headers if `with_headers`.
pub fn rollout(rows: &[WecRollout], with_headers: bool) -> String {
    if rows.is_empty() {
        return "The policy's Binding has no WEC.\n".into();
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let of = |n: usize| format!("{n}/{}", r.selected);
            vec![
                r.wec.clone(),
                r.selected.to_string(),
                of(r.delivered),
                of(r.applied),
                of(r.available),
                of(r.status_returned),
                r.healthy
                    .map_or_else(|| "-".to_string(), |h| format!("{h}/{}", r.selected)),
            ]
        })
        .collect();
    let mut text = table(
        &[
            "WEC",
            "SELECTED",
            "DELIVERED",
            "APPLIED",
            "AVAILABLE",
            "STATUS",
            "HEALTHY",
        ],
        &cells,
        with_headers,
    );
    for row in rows {
        if let Some(unhealthy) = &row.first_unhealthy {
            text += &format!("  {}: {unhealthy}\n", row.wec);
        }
    }
    text
}

/// `trace`'s waterfall, with where Jaeger shows it.
pub fn trace(trace: &Value, jaeger: &str) -> String {
    let id = crate::trace::id(trace);
    let mut text = format!("TRACE {id}\n");
    for line in crate::trace::waterfall(trace) {
        text += &line;
        text += "\n";
    }
    let base = jaeger.trim_end_matches('/');
    // Only the API's URL: a Jaeger built without its UI's assets (as on the local stack) serves
    // no page at /trace/<id>.
    text += &format!("\nJSON: {base}/api/traces/{id}   (in a Jaeger with its UI: /trace/{id})\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![vec!["cluster1".to_string(), "3/3".to_string()]];
        assert_eq!(
            table(&["WEC", "APPLIED"], &rows, true),
            "WEC        APPLIED\ncluster1   3/3\n"
        );
        assert_eq!(table(&["WEC", "APPLIED"], &rows, false), "cluster1   3/3\n");
        assert_eq!(table(&["WEC", "A LONG HEADER"], &rows, false), "cluster1   3/3\n");
    }
}
