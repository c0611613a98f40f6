//! `get <resource>`: one resource listed on every WEC at once, as `kubectl get` lists it in one
//! cluster, with a WEC column first. The WECs are the ITS's ManagedClusters; each is read through
//! the kubeconfig context its name maps to, concurrently, each within a deadline: a WEC that does
//! not answer costs its rows, not the others'.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;
use ks_shared::ocm::ManagedCluster;
use kube::api::{Api, DynamicObject, ListParams, TypeMeta};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::target::{self, Resource};

/// The annotation that says, in `-o json|yaml`, which WEC an object was read from.
pub const WEC_ANNOTATION: &str = "kubestellar.io/wec";

/// What `{wec}` stands for in a context template.
const WEC_PLACEHOLDER: &str = "{wec}";

/// What to list on each WEC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// The resource as typed (`deploy`, `cm`, `deployments.apps`, ...).
    pub resource: String,
    /// Only the object of this name.
    pub name: Option<String>,
    pub namespaces: Namespaces,
    /// A label selector, as `kubectl get -l` takes it.
    pub selector: Option<String>,
}

/// Which namespaces a namespaced resource is listed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    All,
    /// This one; `None`: the WEC context's namespace, else `default` (as `kubectl --context`).
    One(Option<String>),
}

/// One WEC's answer: the resource as it serves it, and its objects.
#[derive(Clone, Debug)]
pub struct Answered {
    pub wec: String,
    pub resource: Resource,
    pub objects: Vec<DynamicObject>,
}

/// Every WEC's answer, or why it gave none.
#[derive(Clone, Debug, Default)]
pub struct Gathered {
    pub answered: Vec<Answered>,
    /// WEC, and the error (naming the context).
    pub failed: Vec<(String, String)>,
}

/// Whether every WEC answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completeness {
    Complete,
    /// Some WECs answered, some did not: their rows are missing.
    Partial,
    /// No WEC answered.
    Nothing,
}

impl Gathered {
    pub fn completeness(&self) -> Completeness {
        match (self.answered.is_empty(), self.failed.is_empty()) {
            (_, true) => Completeness::Complete,
            (false, false) => Completeness::Partial,
            (true, false) => Completeness::Nothing,
        }
    }

    /// How many objects the WECs hold.
    pub fn count(&self) -> usize {
        self.answered.iter().map(|a| a.objects.len()).sum()
    }
}

/// The query of `get <resource> [<name>]`; the resource may be `<resource>/<name>`, as kubectl
/// takes it.
pub fn query(
    resource: &str,
    name: Option<&str>,
    namespaces: Namespaces,
    selector: Option<String>,
) -> anyhow::Result<Query> {
    let (resource, name) = match (resource.contains('/'), name) {
        (false, name) => (resource, name),
        (true, None) => {
            let (resource, name) = target::split(resource)?;
            (resource, Some(name))
        }
        (true, Some(name)) => anyhow::bail!("{resource:?} names an object already: leave out {name:?}"),
    };
    Ok(Query {
        resource: resource.to_string(),
        name: name.map(String::from),
        namespaces,
        selector,
    })
}

/// A `--wec-context-template`: it must name the WEC, or every WEC would be read in one context.
pub fn parse_template(template: &str) -> Result<String, String> {
    if template.contains(WEC_PLACEHOLDER) {
        Ok(template.to_string())
    } else {
        Err(format!(
            "{template:?} does not contain {WEC_PLACEHOLDER} (e.g. {WEC_PLACEHOLDER} or kind-{WEC_PLACEHOLDER})"
        ))
    }
}

/// The kubeconfig context of `wec`: `template` with `{wec}` replaced by its name.
pub fn context_for(template: &str, wec: &str) -> String {
    template.replace(WEC_PLACEHOLDER, wec)
}

/// A `--wec-timeout` as kubectl writes durations: a number with unit `ms`, `s`, `m` or `h`
/// (a bare number is seconds); more than zero.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || format!("{text:?} is not a duration such as 500ms, 10s, 2m or 1h");
    let n: u64 = number.parse().map_err(|_| bad())?;
    let duration = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(bad()),
    };
    if duration.is_zero() {
        return Err(format!("{text:?}: a WEC needs more than no time to answer"));
    }
    Ok(duration)
}

/// The WECs: the ITS's ManagedClusters, by name.
pub async fn wecs(its: &Client) -> kube::Result<Vec<String>> {
    let mut names: Vec<String> = Api::<ManagedCluster>::all(its.clone())
        .list_metadata(&ListParams::default())
        .await?
        .into_iter()
        .map(|c| c.name_any())
        .collect();
    names.sort();
    Ok(names)
}

/// Asks every WEC at once, each in the context `template` maps it to and within `timeout`.
pub async fn gather(
    kubeconfig: Option<&Path>,
    wecs: &[String],
    template: &str,
    query: &Query,
    timeout: Duration,
) -> Gathered {
    let asked = wecs.iter().map(|wec| async move {
        let context = context_for(template, wec);
        let answer = match tokio::time::timeout(timeout, list(kubeconfig, &context, query)).await {
            Ok(answer) => answer,
            Err(_) => Err(anyhow::anyhow!("no answer within {timeout:?}")),
        };
        (wec, answer.with_context(|| format!("context {context:?}")))
    });
    let mut gathered = Gathered::default();
    for (wec, answer) in futures::future::join_all(asked).await {
        match answer {
            Ok((resource, objects)) => gathered.answered.push(Answered {
                wec: wec.clone(),
                resource,
                objects,
            }),
            Err(err) => gathered.failed.push((wec.clone(), format!("{err:#}"))),
        }
    }
    gathered
}

/// The query's objects in one context, with the resource as that cluster serves it.
async fn list(
    kubeconfig: Option<&Path>,
    context: &str,
    query: &Query,
) -> anyhow::Result<(Resource, Vec<DynamicObject>)> {
    let client = ks_shared::client::client(kubeconfig, Some(context)).await?;
    let served = target::discover(&client).await.context("discovery")?;
    let resource = target::find(&served, &query.resource)?;
    let api_resource = resource.api_resource();
    let api: Api<DynamicObject> = match &query.namespaces {
        Namespaces::One(namespace) if resource.namespaced => {
            let namespace = namespace.as_deref().unwrap_or(client.default_namespace());
            Api::namespaced_with(client.clone(), namespace, &api_resource)
        }
        _ => Api::all_with(client.clone(), &api_resource),
    };
    let mut params = ListParams::default();
    if let Some(selector) = &query.selector {
        params = params.labels(selector);
    }
    if let Some(name) = &query.name {
        params = params.fields(&format!("metadata.name={name}"));
    }
    let listed = api
        .list(&params)
        .await
        .with_context(|| format!("listing {}", resource.qualified()))?;
    Ok((resource, listed.items))
}

/// Which columns a table has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Columns {
    pub namespace: bool,
    /// `-o wide`: also the conditions that hold, and the labels.
    pub wide: bool,
}

impl Columns {
    pub fn headers(self) -> Vec<&'static str> {
        let mut headers = vec!["WEC"];
        if self.namespace {
            headers.push("NAMESPACE");
        }
        headers.extend(["NAME", "AGE"]);
        if self.wide {
            headers.extend(["CONDITIONS", "LABELS"]);
        }
        headers
    }
}

/// The table's columns for `gathered`: NAMESPACE with `-A` when the resource is namespaced.
pub fn columns(gathered: &Gathered, all_namespaces: bool, wide: bool) -> Columns {
    Columns {
        namespace: all_namespaces && gathered.answered.iter().any(|a| a.resource.namespaced),
        wide,
    }
}

/// One object's row, `now` being the time its age is counted to.
pub fn row(wec: &str, object: &DynamicObject, columns: Columns, now: Timestamp) -> Vec<String> {
    let mut cells = vec![wec.to_string()];
    if columns.namespace {
        cells.push(object.namespace().unwrap_or_default());
    }
    let age = object.metadata.creation_timestamp.as_ref().map_or_else(
        || "<unknown>".to_string(),
        |t| human_age(now.as_second() - t.0.as_second()),
    );
    cells.extend([object.name_any(), age]);
    if columns.wide {
        cells.push(or_none(&true_conditions(object).join(",")));
        let labels: Vec<String> = object.labels().iter().map(|(k, v)| format!("{k}={v}")).collect();
        cells.push(or_none(&labels.join(",")));
    }
    cells
}

fn or_none(text: &str) -> String {
    if text.is_empty() { "<none>".into() } else { text.into() }
}

/// The types of the object's conditions whose status is True (`Available`, `Ready`, ...).
fn true_conditions(object: &DynamicObject) -> Vec<String> {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str().map(String::from))
        .collect()
}

/// Every row, WEC by WEC (in the order they were asked).
pub fn rows(gathered: &Gathered, columns: Columns, now: Timestamp) -> Vec<Vec<String>> {
    gathered
        .answered
        .iter()
        .flat_map(|a| a.objects.iter().map(move |o| row(&a.wec, o, columns, now)))
        .collect()
}

/// An age as kubectl prints it (apimachinery's `HumanDuration`): `45s`, `5m3s`, `3h20m`, `9d`, ...
pub fn human_age(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    let (minutes, hours) = (seconds / 60, seconds / 3600);
    let (days, years) = (hours / 24, hours / (24 * 365));
    let with = |big: i64, unit: &str, small: i64, small_unit: &str| match small {
        0 => format!("{big}{unit}"),
        small => format!("{big}{unit}{small}{small_unit}"),
    };
    match () {
        _ if seconds < 120 => format!("{seconds}s"),
        _ if minutes < 10 => with(minutes, "m", seconds % 60, "s"),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => with(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => with(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => with(years, "y", days % 365, "d"),
        _ => format!("{years}y"),
    }
}

/// `-o json|yaml`: a `List` of the objects, each with its `apiVersion` and `kind` and the
/// annotation [`WEC_ANNOTATION`] naming its WEC (and, as kubectl prints them, no managed fields).
pub fn list_object(gathered: &Gathered) -> Value {
    let items: Vec<DynamicObject> = gathered
        .answered
        .iter()
        .flat_map(|a| {
            a.objects.iter().map(|object| {
                let mut object = object.clone();
                object.types = Some(TypeMeta {
                    api_version: a.resource.api_version(),
                    kind: a.resource.kind.clone(),
                });
                object
                    .annotations_mut()
                    .insert(WEC_ANNOTATION.to_string(), a.wec.clone());
                // As kubectl prints objects: without their managed fields.
                object.metadata.managed_fields = None;
                object
            })
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
}

/// `-o name`: `<wec>/<resource>/<name>` per object, the resource as `kubectl get -o name` writes
/// it (`configmap`, `deployment.apps`).
pub fn names(gathered: &Gathered) -> String {
    gathered
        .answered
        .iter()
        .flat_map(|a| {
            let kind = target::qualified(&a.resource.group, &a.resource.kind.to_lowercase());
            a.objects
                .iter()
                .map(move |o| format!("{}/{kind}/{}\n", a.wec, o.name_any()))
        })
        .collect()
}

/// The failed WECs, a line each, for standard error.
pub fn failures(gathered: &Gathered) -> Vec<String> {
    gathered
        .failed
        .iter()
        .map(|(wec, error)| format!("WEC {wec} could not be read: {error}"))
        .collect()
}

/// Where nothing was found, said as kubectl says it.
pub fn nothing_found(query: &Query) -> String {
    match &query.namespaces {
        Namespaces::One(Some(namespace)) => format!("No resources found on any WEC in {namespace} namespace."),
        _ => "No resources found on any WEC.".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A ConfigMap-typed object in `namespace`, created at second 1,000,000 of the epoch.
    fn object(namespace: &str, name: &str, labels: &[(&str, &str)], status: Value) -> DynamicObject {
        let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut object = DynamicObject::new(
            name,
            &kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        )
        .within(namespace)
        .data(json!({"status": status}));
        object.metadata.labels = Some(labels);
        object.metadata.managed_fields = Some(vec![Default::default()]);
        object.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::from_second(1_000_000).expect("a time"),
        ));
        object
    }

    fn resource(group: &str, kind: &str, namespaced: bool) -> Resource {
        Resource {
            group: group.into(),
            version: "v1".into(),
            plural: format!("{}s", kind.to_lowercase()),
            kind: kind.into(),
            namespaced,
        }
    }

    fn gathered() -> Gathered {
        let deployments = resource("apps", "Deployment", true);
        Gathered {
            answered: vec![
                Answered {
                    wec: "cluster1".into(),
                    resource: deployments.clone(),
                    objects: vec![
                        object(
                            "shop",
                            "web",
                            &[("app", "web"), ("tier", "front")],
                            json!({
                                "conditions": [
                                    {"type": "Available", "status": "True"},
                                    {"type": "Progressing", "status": "False"},
                                ]
                            }),
                        ),
                        object("shop", "db", &[], json!({})),
                    ],
                },
                Answered {
                    wec: "cluster2".into(),
                    resource: deployments,
                    objects: vec![object("shop", "web", &[("app", "web")], json!({}))],
                },
            ],
            failed: vec![("cluster3".into(), "context \"cluster3\": connection refused".into())],
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_000_000 + 3 * 86_400 + 5 * 3600).expect("a time")
    }

    #[test]
    fn rows_have_the_wec_first_and_namespace_only_with_all_namespaces() {
        let found = gathered();
        let narrow = columns(&found, false, false);
        assert_eq!(narrow.headers(), ["WEC", "NAME", "AGE"]);
        assert_eq!(
            rows(&found, narrow, now()),
            [
                ["cluster1", "web", "3d5h"],
                ["cluster1", "db", "3d5h"],
                ["cluster2", "web", "3d5h"]
            ]
        );
        let wide = columns(&found, true, true);
        assert_eq!(
            wide.headers(),
            ["WEC", "NAMESPACE", "NAME", "AGE", "CONDITIONS", "LABELS"]
        );
        assert_eq!(
            rows(&found, wide, now())[..2],
            [
                ["cluster1", "shop", "web", "3d5h", "Available", "app=web,tier=front"],
                ["cluster1", "shop", "db", "3d5h", "<none>", "<none>"],
            ]
        );
    }

    #[test]
    fn a_cluster_scoped_resource_has_no_namespace_column() {
        let mut found = gathered();
        for answered in &mut found.answered {
            answered.resource.namespaced = false;
        }
        assert!(!columns(&found, true, false).namespace);
    }

    #[test]
    fn json_is_a_list_whose_items_name_their_wec() {
        let list = list_object(&gathered());
        assert_eq!(list["kind"], "List");
        let items = list["items"].as_array().expect("items");
        assert_eq!(items.len(), 3);
        assert_eq!(items[0]["apiVersion"], "apps/v1");
        assert_eq!(items[0]["kind"], "Deployment");
        assert_eq!(items[0]["metadata"]["annotations"][WEC_ANNOTATION], "cluster1");
        assert_eq!(items[2]["metadata"]["annotations"][WEC_ANNOTATION], "cluster2");
        assert_eq!(items[2]["metadata"]["name"], "web");
        assert!(items.iter().all(|i| i["metadata"].get("managedFields").is_none()));
    }

    #[test]
    fn names_are_wec_resource_name() {
        assert_eq!(
            names(&gathered()),
            "cluster1/deployment.apps/web\ncluster1/deployment.apps/db\ncluster2/deployment.apps/web\n"
        );
        let mut core = gathered();
        core.answered.truncate(1);
        core.answered[0].resource = resource("", "ConfigMap", true);
        core.answered[0].objects.truncate(1);
        assert_eq!(names(&core), "cluster1/configmap/web\n");
    }

    #[test]
    fn partial_when_some_wecs_answer_and_nothing_when_none_does() {
        let mut found = gathered();
        assert_eq!(found.completeness(), Completeness::Partial);
        assert_eq!(
            failures(&found),
            ["WEC cluster3 could not be read: context \"cluster3\": connection refused"]
        );
        found.failed.clear();
        assert_eq!(found.completeness(), Completeness::Complete);
        assert_eq!(Gathered::default().completeness(), Completeness::Complete);
        let none = Gathered {
            answered: vec![],
            failed: vec![("cluster1".into(), "timeout".into())],
        };
        assert_eq!(none.completeness(), Completeness::Nothing);
        assert_eq!(found.count(), 3);
    }

    #[test]
    fn the_object_is_named_apart_or_after_a_slash() {
        let names = |resource, name| query(resource, name, Namespaces::All, None).map(|q| (q.resource, q.name));
        assert_eq!(names("deploy", None).unwrap(), ("deploy".into(), None));
        assert_eq!(
            names("deploy", Some("web")).unwrap(),
            ("deploy".into(), Some("web".into()))
        );
        assert_eq!(
            names("deploy/web", None).unwrap(),
            ("deploy".into(), Some("web".into()))
        );
        let twice = names("deploy/web", Some("db")).unwrap_err().to_string();
        assert!(twice.contains("names an object already"), "{twice}");
        assert!(names("deploy/", None).is_err());
    }

    #[test]
    fn each_wec_maps_to_a_context_by_the_template() {
        assert_eq!(context_for("{wec}", "cluster1"), "cluster1");
        assert_eq!(context_for("kind-{wec}", "cluster1"), "kind-cluster1");
        assert_eq!(parse_template("kind-{wec}"), Ok("kind-{wec}".into()));
        assert!(
            parse_template("cluster1")
                .unwrap_err()
                .contains("does not contain {wec}")
        );
    }

    #[test]
    fn timeouts_are_written_as_kubectl_writes_durations() {
        assert_eq!(parse_timeout("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_timeout("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_timeout("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "s", "10x", "-1s", "1.5s"] {
            assert!(parse_timeout(bad).unwrap_err().contains("is not a duration"), "{bad}");
        }
        assert!(parse_timeout("0s").is_err());
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (125, "2m5s"),
            (180, "3m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600 + 20 * 60, "3h20m"),
            (5 * 3600, "5h"),
            (47 * 3600, "47h"),
            (3 * 86_400 + 5 * 3600, "3d5h"),
            (9 * 86_400, "9d"),
            (3 * 365 * 86_400 + 10 * 86_400, "3y10d"),
            (9 * 365 * 86_400, "9y"),
        ];
        for (seconds, age) in cases {
            assert_eq!(human_age(seconds), age, "{seconds}s");
        }
    }

    #[test]
    fn nothing_found_names_the_namespace_asked() {
        let query = |namespaces| Query {
            resource: "cm".into(),
            name: None,
            namespaces,
            selector: None,
        };
        assert!(nothing_found(&query(Namespaces::One(Some("shop".into())))).contains("in shop namespace"));
        assert_eq!(nothing_found(&query(Namespaces::All)), "No resources found on any WEC.");
    }
}
