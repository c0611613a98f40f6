//! The status controller (in ks-hub, run by the stack for wds1) with the real OCM work agents and
//! our status agents: WEC status comes back into the WDS objects (singleton and summed over
//! WECs), StatusCollectors become CombinedStatuses, bad collectors and bad WorkStatuses are
//! reported or ignored, a hub restarted after a policy change converges to the new policy, and
//! each object's health on each WEC sums up on its policy.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use ks_shared::api::{
    Binding, BindingPolicy, CombinedStatus, HealthRule, NamedStatusCombination, StatusCollector, WorkStatus,
    condition_type,
};
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::stack::{node, ocm, registry, wait_for};
use ks_tests::stack_test;
use ks_tests::tools::{Tools, app_yaml, crd_yaml, custom_object_yaml, policy_yaml, singleton_policy_yaml};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::wait::conditions;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(120);
const PATH: &[&str] = &["hub-wds1", "ocm-agent-cluster1", "ocm-agent-cluster2"];
const WECS: [&str; 2] = ["cluster1", "cluster2"];

ks_tests::stack_main!(
    run,
    vec![
        stack_test!(singleton_status_follows_qualified_wecs, PATH),
        stack_test!(multi_wec_status_sums_replicas, PATH),
        stack_test!(collectors_become_combined_status, PATH),
        stack_test!(bad_collectors_and_workstatuses_are_reported_or_ignored, PATH),
        stack_test!(a_costly_expression_is_refused_and_others_still_run, PATH),
        stack_test!(restarted_hub_converges_to_the_new_policy, PATH, alone),
        stack_test!(status_coming_back_leaves_the_binding_alone, PATH),
        stack_test!(a_status_written_over_is_returned_again, PATH),
        stack_test!(an_object_that_cannot_run_is_degraded_where_it_fails, PATH),
        stack_test!(a_job_is_progressing_until_it_completes_or_fails, PATH),
        stack_test!(a_custom_resource_is_judged_by_its_health_rule, PATH),
        stack_test!(a_custom_resource_without_a_status_subresource_returns_its_status, PATH),
        stack_test!(a_multi_wec_aggregate_says_what_the_least_healthy_wecs_say, PATH),
        stack_test!(a_real_node_shows_real_readiness_and_crash_loops, PATH),
    ]
);

fn deployment(replicas: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

/// Applies a policy sending the test's namespace and its Deployment `web` to the WECs with
/// `wecs` labels; `modulation` (want-flags, statusCollectors) applies to the Deployment only.
async fn bind(wds: &Client, name: &str, ns: &str, wecs: Value, modulation: Value) -> anyhow::Result<()> {
    let mut deployment = json!({"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "web"}}]});
    for (key, value) in modulation.as_object().into_iter().flatten() {
        deployment[key] = value.clone();
    }
    let policy = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": name},
           "spec": {"clusterSelectors": [{"matchLabels": wecs}],
                    "downsync": [{"apiGroup": "", "resources": ["namespaces"], "objectNames": [ns]}, deployment]}});
    apply(&Api::<BindingPolicy>::all(wds.clone()), policy).await?;
    Ok(())
}

/// Only the WEC named `wec`, as cluster selector labels.
fn only(wec: &str) -> Value {
    json!({"name": wec})
}

fn collected_by(names: &[&String]) -> Value {
    json!({"statusCollectors": names})
}

/// A collector counting the rows.
fn counting() -> Value {
    json!({"combinedFields": [{"name": "n", "type": "COUNT"}], "limit": 5})
}

/// A collector listing the WECs whose rows pass `filter`.
fn listing_wecs(filter: &str) -> Value {
    json!({"filter": filter, "select": [{"name": "wec", "def": "inventory.name"}], "limit": 5})
}

async fn put_collector(wds: &Client, name: &str, spec: Value) -> anyhow::Result<()> {
    let collector = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "StatusCollector",
                           "metadata": {"name": name}, "spec": spec});
    apply(&Api::<StatusCollector>::all(wds.clone()), collector).await?;
    Ok(())
}

/// The WDS Deployment's returned `availableReplicas` and `replicas`.
fn returned(d: Option<&Deployment>) -> (Option<i32>, Option<i32>) {
    let status = d.and_then(|d| d.status.as_ref());
    (
        status.and_then(|s| s.available_replicas),
        status.and_then(|s| s.replicas),
    )
}

/// Waits until the test's WDS Deployment `web` satisfies `condition`.
async fn wait_web(
    deployments: &Api<Deployment>,
    what: &str,
    condition: impl kube::runtime::wait::Condition<Deployment>,
) -> anyhow::Result<()> {
    wait_until(deployments.clone(), "web", what, DEADLINE, condition).await?;
    Ok(())
}

fn cleared(d: Option<&Deployment>) -> bool {
    d.is_some_and(|d| d.status.clone().unwrap_or_default() == Default::default())
}

/// Deletes the policies (waiting for the binding controller to let them go), the collectors and
/// the namespace.
async fn cleanup(ctx: &Ctx, policies: &[String], collectors: &[String], ns: &str) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let api: Api<BindingPolicy> = Api::all(wds.clone());
    for name in policies {
        api.delete(name, &DeleteParams::default()).await?;
        wait_until(api.clone(), name, "deleted", DEADLINE, |p: Option<&BindingPolicy>| {
            p.is_none()
        })
        .await?;
    }
    let api: Api<StatusCollector> = Api::all(wds);
    for name in collectors {
        api.delete(name, &DeleteParams::default()).await?;
    }
    ctx.delete_namespace("wds1", ns).await
}

async fn singleton_status_follows_qualified_wecs(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    apply(&deployments, deployment(1)).await?;
    let singleton = format!("{ns}-singleton");
    let asking = json!({"wantSingletonReportedState": true});
    bind(&wds, &singleton, &ns, only("cluster1"), asking.clone()).await?;
    wait_web(
        &deployments,
        "showing cluster1's 1 available replica",
        |d: Option<&Deployment>| returned(d).0 == Some(1),
    )
    .await?;
    // Which `kubectl describe` tells, as an Event on the Deployment.
    let tools = Tools::new(&ctx, "singleton")?;
    wait_for("kubectl describe to tell the status returned", DEADLINE, || async {
        let described = tools.kubectl("wds1", &["describe", "deployment", "web", "-n", &ns])?;
        Ok(described
            .lines()
            .any(|l| l.contains("Normal") && l.contains("StatusReturned")))
    })
    .await?;

    // A policy without the flag also sends it to cluster2: cluster2 does not count, so the status
    // still comes back from cluster1, and follows it when the Deployment scales.
    let plain = format!("{ns}-plain");
    bind(&wds, &plain, &ns, only("cluster2"), json!({})).await?;
    let on_cluster2: Api<Deployment> = Api::namespaced(ctx.client("cluster2").await?, &ns);
    wait_until(
        on_cluster2,
        "web",
        "available on cluster2",
        DEADLINE,
        |d: Option<&Deployment>| returned(d).0 == Some(1),
    )
    .await?;
    apply(&deployments, deployment(2)).await?;
    wait_web(
        &deployments,
        "showing cluster1's 2 available replicas",
        |d: Option<&Deployment>| returned(d) == (Some(2), Some(2)),
    )
    .await?;

    // Retargeted to a WEC that does not exist, the policy has no WEC to return status from.
    bind(&wds, &singleton, &ns, only("nowhere"), asking).await?;
    wait_web(&deployments, "with its returned status cleared", cleared).await?;
    cleanup(&ctx, &[singleton, plain], &[], &ns).await
}

async fn multi_wec_status_sums_replicas(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    apply(&deployments, deployment(1)).await?;
    let name = format!("{ns}-multi");
    let multi = json!({"wantMultiWECReportedState": true});
    bind(&wds, &name, &ns, json!({"location-group": "edge"}), multi).await?;
    let summed = |d: Option<&Deployment>| {
        let available = d
            .and_then(|d| d.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Available" && c.status == "True"));
        returned(d) == (Some(2), Some(2)) && available
    };
    wait_web(&deployments, "showing 2 replicas, 2 available, Available", summed).await?;
    cleanup(&ctx, &[name], &[], &ns).await
}

/// A result as text: one row per line, cells separated by `|`, numbers and strings as they are,
/// objects as JSON.
fn table(result: &NamedStatusCombination) -> Vec<String> {
    result
        .rows
        .iter()
        .map(|row| {
            let cells: Vec<String> = row
                .columns
                .iter()
                .map(|c| match c.type_.as_str() {
                    "String" => c.string.clone().unwrap_or_default(),
                    "Number" => c.float.clone().unwrap_or_default(),
                    "Object" => c.object.clone().unwrap_or_default().to_string(),
                    other => other.to_string(),
                })
                .collect();
            cells.join("|")
        })
        .collect()
}

/// The results of a CombinedStatus as `collector -> table`.
fn tables(combined: Option<&CombinedStatus>) -> std::collections::BTreeMap<String, Vec<String>> {
    combined
        .iter()
        .flat_map(|c| c.spec.results.iter())
        .map(|r| (r.name.clone(), table(r)))
        .collect()
}

/// Waits until the policy's Binding says whether its StatusCollectors are all there.
async fn collectors_condition(wds: &kube::Client, binding: &str, status: &str, message: &str) -> anyhow::Result<()> {
    let has = |b: Option<&Binding>| {
        b.and_then(|b| b.status.as_ref())
            .and_then(|s| s.condition("StatusCollectorsAvailable"))
            .is_some_and(|c| c.status == status && c.message == message)
    };
    let what = format!("StatusCollectorsAvailable={status} ({message})");
    wait_until(Api::<Binding>::all(wds.clone()), binding, &what, DEADLINE, has).await?;
    Ok(())
}

/// The name of the CombinedStatus of the test's Deployment for `policy`.
async fn combined_status_name(wds: &kube::Client, ns: &str, policy: &str) -> anyhow::Result<String> {
    let deployment = Api::<Deployment>::namespaced(wds.clone(), ns).get("web").await?;
    let policy = Api::<BindingPolicy>::all(wds.clone()).get(policy).await?;
    let uid = |m: &kube::api::ObjectMeta| m.uid.clone().unwrap_or_default();
    Ok(format!("{}.{}", uid(&deployment.metadata), uid(&policy.metadata)))
}

async fn collectors_become_combined_status(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    apply(&Api::<Deployment>::namespaced(wds.clone(), &ns), deployment(1)).await?;
    let name = |suffix: &str| format!("{ns}-{suffix}");
    let over_available =
        |op: &str| json!({"name": op.to_lowercase(), "type": op, "subject": "returned.status.availableReplicas"});
    let specs = [
        (
            "full",
            json!({"select": [{"name": "wec", "def": "inventory.name"}, {"name": "available", "def": "returned.status.availableReplicas"},
                              {"name": "status", "def": "returned.status"}], "limit": 10}),
        ),
        (
            "sum",
            json!({"combinedFields": [{"name": "wecs", "type": "COUNT"}, over_available("SUM")], "limit": 10}),
        ),
        (
            "names",
            json!({"filter": "inventory.name != 'cluster1'", "select": [{"name": "wec", "def": "inventory.name"}], "limit": 10}),
        ),
        (
            "none",
            json!({"filter": "false", "combinedFields": [{"name": "count", "type": "COUNT"}, over_available("MAX"),
                   over_available("MIN"), over_available("SUM"), over_available("AVG")], "limit": 10}),
        ),
    ];
    for (suffix, spec) in &specs {
        put_collector(&wds, &name(suffix), spec.clone()).await?;
    }
    // `late` is named by the policy before it exists.
    let all = ["full", "sum", "names", "none", "late"].map(name);
    let policy_name = name("collected");
    let edge = json!({"location-group": "edge"});
    bind(&wds, &policy_name, &ns, edge, json!({"statusCollectors": all})).await?;
    let missing = format!("Missing StatusCollector(s) [{}]", name("late"));
    collectors_condition(&wds, &policy_name, "False", &missing).await?;

    let combined: Api<CombinedStatus> = Api::namespaced(wds.clone(), &ns);
    let cs = combined_status_name(&wds, &ns, &policy_name).await?;
    let full_row = |wec: &str| format!("{wec}|1|");
    let expected = |with_late: bool| {
        let mut expected = std::collections::BTreeMap::from([
            (name("names"), vec!["cluster2".to_string()]),
            (name("none"), vec!["0|-Inf|+Inf|0|NaN".to_string()]),
            (name("sum"), vec!["2|2".to_string()]),
        ]);
        if with_late {
            expected.insert(name("late"), vec!["2".to_string()]);
        }
        expected
    };
    // The full list has each WEC's whole status as its last column.
    let matches = |with_late: bool| {
        move |c: Option<&CombinedStatus>| {
            let mut tables = tables(c);
            let full = tables.remove(&name("full")).unwrap_or_default();
            let full_ok = full.len() == 2
                && ["cluster1", "cluster2"]
                    .iter()
                    .zip(&full)
                    .all(|(wec, row)| row.starts_with(&full_row(wec)) && row.contains("\"availableReplicas\":1"));
            full_ok && tables == expected(with_late)
        }
    };
    let shown = wait_until(
        combined.clone(),
        &cs,
        "holding the four collectors' results",
        DEADLINE,
        matches(false),
    )
    .await;
    if let Err(err) = shown {
        let now = combined.get_opt(&cs).await?;
        anyhow::bail!("{err:#}; it holds {:?}", tables(now.as_ref()));
    }
    let labels = combined.get(&cs).await?.metadata.labels.unwrap_or_default();
    anyhow::ensure!(
        labels.get("status.kubestellar.io/binding-policy") == Some(&policy_name)
            && labels.get("status.kubestellar.io/name").map(String::as_str) == Some("web"),
        "labels {labels:?}"
    );

    // A collector created after the policy is picked up.
    put_collector(&wds, &name("late"), counting()).await?;
    collectors_condition(&wds, &policy_name, "True", "All StatusCollector(s) are available").await?;
    wait_until(
        combined,
        &cs,
        "holding the late collector's result",
        DEADLINE,
        matches(true),
    )
    .await?;
    cleanup(&ctx, &[policy_name], &all, &ns).await
}

async fn bad_collectors_and_workstatuses_are_reported_or_ignored(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    // A WorkStatus from this WDS's WEC for an object the WDS does not have: nothing is created.
    let mailbox: Api<WorkStatus> = Api::namespaced(ctx.client("its1").await?, "cluster1");
    let ghost = format!("{ns}-ghost");
    let work_status = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
        "metadata": {"name": ghost, "labels": {"transport.kubestellar.io/originWdsName": "wds1"}},
        "spec": {"sourceRef": {"group": "apps", "version": "v1", "resource": "deployments", "kind": "Deployment",
                               "name": "ghost", "namespace": ns}}});
    apply(&mailbox, work_status).await?;
    let status = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
                        "status": {"availableReplicas": 1}});
    mailbox
        .patch_status(&ghost, &PatchParams::apply("ks-tests").force(), &Patch::Apply(&status))
        .await?;

    apply(&Api::<Deployment>::namespaced(wds.clone(), &ns), deployment(1)).await?;
    let collectors: Api<StatusCollector> = Api::all(wds.clone());
    let broken = format!("{ns}-broken");
    let mixed = format!("{ns}-mixed");
    put_collector(&wds, &broken, listing_wecs("returned.status.(")).await?;
    let mut mixed_spec = counting();
    mixed_spec["select"] = listing_wecs("true")["select"].clone();
    put_collector(&wds, &mixed, mixed_spec).await?;
    let reports = |prefix: &'static str| {
        move |c: Option<&StatusCollector>| {
            c.and_then(|c| c.status.as_ref())
                .is_some_and(|s| s.errors.iter().any(|e| e.starts_with(prefix)))
        }
    };
    let syntax = "filter expression invalid: failed to parse expression";
    wait_until(collectors.clone(), &broken, syntax, DEADLINE, reports(syntax)).await?;
    // `kubectl describe` tells it too, as an Event on the collector.
    let tools = Tools::new(&ctx, "collectors")?;
    wait_for("kubectl describe to tell the invalid collector", DEADLINE, || async {
        let described = tools.kubectl("wds1", &["describe", "statuscollector", &broken])?;
        Ok(described
            .lines()
            .any(|l| l.contains("Warning") && l.contains("Invalid") && l.contains(syntax)))
    })
    .await?;

    // Expressions that overflowed a thread's stack and aborted the hub (it then crash-looped on
    // them): deep parentheses are fine, a chain of 100 additions is too deep for the evaluator.
    let parenthesised = format!("{ns}-parens");
    let parens = format!("{}true{}", "(".repeat(30), ")".repeat(30));
    put_collector(&wds, &parenthesised, listing_wecs(&parens)).await?;
    let chained = format!("{ns}-chained");
    put_collector(&wds, &chained, listing_wecs(&format!("1{} == 101", "+1".repeat(100)))).await?;
    let depth = "filter expression invalid: failed to check expression: nested 102 deep, more than 64";
    wait_until(collectors.clone(), &chained, depth, DEADLINE, reports(depth)).await?;
    let valid = |c: Option<&StatusCollector>| {
        c.and_then(|c| c.status.as_ref())
            .is_some_and(|s| s.errors.is_empty() && s.observed_generation == 1)
    };
    wait_until(collectors.clone(), &parenthesised, "valid", DEADLINE, valid).await?;
    let structure = "groupBy and combinedFields must be empty if select is not";
    wait_until(collectors.clone(), &mixed, structure, DEADLINE, reports(structure)).await?;

    // An invalid collector counts as missing for the policy naming it, until it is fixed.
    let policy_name = format!("{ns}-bad");
    bind(&wds, &policy_name, &ns, only("cluster1"), collected_by(&[&broken])).await?;
    let missing = format!("Missing StatusCollector(s) [{broken}]");
    collectors_condition(&wds, &policy_name, "False", &missing).await?;
    put_collector(&wds, &broken, listing_wecs("has(returned.status)")).await?;
    let fixed = |c: Option<&StatusCollector>| {
        c.and_then(|c| c.status.as_ref())
            .is_some_and(|s| s.errors.is_empty() && s.observed_generation == 2)
    };
    wait_until(collectors, &broken, "without errors", DEADLINE, fixed).await?;
    collectors_condition(&wds, &policy_name, "True", "All StatusCollector(s) are available").await?;
    let cs = combined_status_name(&wds, &ns, &policy_name).await?;
    let listed = |c: Option<&CombinedStatus>| tables(c).get(&broken) == Some(&vec!["cluster1".to_string()]);
    wait_until(
        Api::namespaced(wds.clone(), &ns),
        &cs,
        "listing cluster1",
        DEADLINE,
        listed,
    )
    .await?;

    // The WorkStatus for the missing object created nothing. (Had it crashed the hub, the hub
    // would crash again at every start, as it looks at every WorkStatus then: the work above and
    // the other tests would not get done.)
    let absent = Api::<Deployment>::namespaced(wds.clone(), &ns).get_opt("ghost").await?;
    anyhow::ensure!(absent.is_none(), "a WorkStatus created a WDS object");
    mailbox.delete(&ghost, &DeleteParams::default()).await?;
    cleanup(&ctx, &[policy_name], &[broken, mixed, parenthesised, chained], &ns).await
}

/// A collector whose work grows with the square of a list the user controls (two nested `map`s
/// over a Deployment's 4,000 container arguments: 16 million steps and more) is refused before it
/// runs, with the reason in the CombinedStatus; the policy's other collector still fills its
/// table, and the hub keeps serving.
async fn a_costly_expression_is_refused_and_others_still_run(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let mut web = deployment(1);
    web["spec"]["template"]["spec"]["containers"][0]["args"] =
        json!((0..4000).map(|i| i.to_string()).collect::<Vec<_>>());
    apply(&Api::<Deployment>::namespaced(wds.clone(), &ns), web).await?;
    let args = "obj.spec.template.spec.containers[0].args";
    let costly = format!("{ns}-costly");
    let squared = format!("{args}.map(x, {args}.map(y, y)).size()");
    put_collector(
        &wds,
        &costly,
        json!({"select": [{"name": "n", "def": squared}], "limit": 5}),
    )
    .await?;
    let wecs = format!("{ns}-wecs");
    put_collector(&wds, &wecs, listing_wecs("true")).await?;
    let policy = format!("{ns}-costly");
    bind(&wds, &policy, &ns, only("cluster1"), collected_by(&[&costly, &wecs])).await?;
    let cs = combined_status_name(&wds, &ns, &policy).await?;
    let refused = |c: Option<&CombinedStatus>| {
        let results = c.map(|c| c.spec.results.clone()).unwrap_or_default();
        let costly_refused = results.iter().any(|r| {
            r.name == costly
                && r.row_errors
                    .iter()
                    .any(|e| e.error.starts_with("evaluation would take up to"))
        });
        costly_refused && tables(c).get(&wecs) == Some(&vec!["cluster1".to_string()])
    };
    wait_until(
        Api::namespaced(wds.clone(), &ns),
        &cs,
        "refusing the costly collector, listing cluster1 in the other",
        DEADLINE,
        refused,
    )
    .await?;
    let hub = ([127, 0, 0, 1], ctx.stack.hub_port("wds1")).into();
    anyhow::ensure!(ks_tests::process::http_get(hub, "/readyz").0 == 200, "the hub is ready");
    cleanup(&ctx, &[policy], &[costly, wecs], &ns).await
}

async fn restarted_hub_converges_to_the_new_policy(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    apply(&deployments, deployment(1)).await?;
    let count = format!("{ns}-count");
    let wecs = format!("{ns}-wecs");
    put_collector(&wds, &count, counting()).await?;
    put_collector(&wds, &wecs, listing_wecs("true")).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let first = format!("{ns}-first");
    let second = format!("{ns}-second");
    let first_before = json!({"wantSingletonReportedState": true, "statusCollectors": [count]});
    bind(&wds, &first, &ns, only("cluster1"), first_before).await?;
    bind(&wds, &second, &ns, only("cluster2"), collected_by(&[&count])).await?;
    wait_web(&deployments, "showing cluster1's status", |d: Option<&Deployment>| {
        returned(d).0 == Some(1)
    })
    .await?;
    let combined: Api<CombinedStatus> = Api::namespaced(wds.clone(), &ns);
    let first_cs = combined_status_name(&wds, &ns, &first).await?;
    let second_cs = combined_status_name(&wds, &ns, &second).await?;
    let counted = |c: Option<&CombinedStatus>| tables(c).len() == 1;
    wait_until(combined.clone(), &first_cs, "counting", DEADLINE, counted).await?;
    let second_uid = wait_until(combined.clone(), &second_cs, "counting", DEADLINE, counted)
        .await?
        .and_then(|c| c.metadata.uid)
        .unwrap_or_default();

    // With the hub down, the first policy stops asking for status and changes collector, and
    // the second policy goes (its finalizer holds it until the hub is back).
    ctx.stack.procs.stop("hub-wds1", Duration::from_secs(10))?;
    let first_after = json!({"statusCollectors": [wecs]});
    bind(&wds, &first, &ns, only("cluster1"), first_after).await?;
    policies.delete(&second, &DeleteParams::default()).await?;
    ctx.stack.up().await?;

    wait_web(&deployments, "with its returned status cleared", cleared).await?;
    let only_wecs = |c: Option<&CombinedStatus>| {
        tables(c) == std::collections::BTreeMap::from([(wecs.clone(), vec!["cluster1".to_string()])])
    };
    wait_until(
        combined.clone(),
        &first_cs,
        "holding only the new collector's result",
        DEADLINE,
        only_wecs,
    )
    .await?;
    wait_until(
        combined,
        &second_cs,
        "deleted with its policy",
        DEADLINE,
        conditions::is_deleted(&second_uid),
    )
    .await?;
    cleanup(&ctx, &[first], &[count, wecs], &ns).await
}

/// An object's resourceVersion as a number (the stack's apiservers number them so).
fn version_of(resource_version: &str) -> anyhow::Result<u64> {
    Ok(resource_version.parse()?)
}

/// The resourceVersion at which `binding` lists the object named `name`, if it does.
fn listed_version(binding: &Binding, name: &str) -> Option<String> {
    binding
        .spec
        .workload
        .namespace_scope
        .iter()
        .find(|o| o.object.name == name)
        .map(|o| o.object.resource_version.clone())
}

/// Status written back into the WDS is not a change to deliver. Defect: every status write gave
/// the object a new resourceVersion, which its Binding listed, so each status change rewrote the
/// Binding and had the transport plan it again (a 153-object rollout with three Deployments'
/// status returned rewrote its Binding 4 times after delivery).
async fn status_coming_back_leaves_the_binding_alone(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "status-binding")?;
    let id = ctx.unique_name("status-binding");
    let label = format!("app.kubernetes.io/name: {id}");
    let yaml = app_yaml(&id, "web", &label)
        + &app_yaml(&id, "other", &label)
        + &policy_yaml(&id, "name: cluster1", &label)
        + &singleton_policy_yaml(&id, "cluster1", &label);
    let file = tools.scratch_file("yaml", &yaml)?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let deployments: Api<Deployment> = Api::namespaced(ctx.client("wds1").await?, &id);
    let web = wait_until(
        deployments.clone(),
        "web",
        "given cluster1's status",
        DEADLINE,
        |d: Option<&Deployment>| returned(d).0 == Some(1),
    )
    .await?;
    let web_now = version_of(&web.and_then(|d| d.metadata.resource_version).unwrap_or_default())?;

    // A change to another Deployment comes after web's status on the hub's one watch of
    // Deployments, so the Binding that shows it was written knowing web's status.
    let annotated = tools.kubectl(
        "wds1",
        &[
            "annotate",
            "-n",
            &id,
            "deployment",
            "other",
            "note=changed",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    )?;
    let annotated = version_of(annotated.trim())?;
    let bindings: Api<Binding> = Api::all(ctx.client("wds1").await?);
    let binding = wait_until(
        bindings,
        &format!("{id}-singleton"),
        "listing the annotated Deployment",
        DEADLINE,
        |b: Option<&Binding>| {
            b.and_then(|b| listed_version(b, "other"))
                .and_then(|v| version_of(&v).ok())
                .is_some_and(|v| v >= annotated)
        },
    )
    .await?
    .ok_or_else(|| anyhow::anyhow!("no Binding"))?;
    let listed = version_of(&listed_version(&binding, "web").unwrap_or_default())?;
    anyhow::ensure!(
        listed < web_now,
        "the Binding lists web at {listed}, the version its returned status gave it ({web_now} or later)"
    );
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    Ok(())
}

/// The returned status is the WEC's: one written over in the WDS (here by hand, as
/// `kubectl patch --subresource=status`) is written back at once, not at the WEC's next change.
async fn a_status_written_over_is_returned_again(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "status-over")?;
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    apply(&deployments, deployment(1)).await?;
    let singleton = format!("{ns}-singleton");
    bind(
        &wds,
        &singleton,
        &ns,
        only("cluster1"),
        json!({"wantSingletonReportedState": true}),
    )
    .await?;
    let returned_one = |d: Option<&Deployment>| returned(d) == (Some(1), Some(1));
    wait_web(&deployments, "showing cluster1's 1 available replica", returned_one).await?;
    let over = r#"{"status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3}}"#;
    tools.patch_status("wds1", &ns, "deployment", "web", over)?;
    wait_web(&deployments, "showing cluster1's status again", returned_one).await?;
    cleanup(&ctx, &[singleton], &[], &ns).await
}

/// A node label key for one test, which only that test's workloads select.
fn node_label(ctx: &Ctx) -> String {
    format!("kubestellar.test/{}", ctx.unique_name("health"))
}

/// Sets (`Some`) or removes (`None`) the label `key` on the kwok node of each WEC in `wecs`.
async fn label_nodes(ctx: &Ctx, wecs: &[&str], key: &str, value: Option<&str>) -> anyhow::Result<()> {
    for wec in wecs {
        let nodes: Api<Node> = Api::all(ctx.client(wec).await?);
        let patch = json!({"metadata": {"labels": {key: value}}});
        nodes
            .patch(ocm::KWOK_NODE_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// A policy sending the namespace `ns` and its objects labelled `app: health` to both WECs.
async fn bind_health(wds: &Client, name: &str, ns: &str) -> anyhow::Result<()> {
    let policy = json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": name},
           "spec": {"clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                    "downsync": [{"apiGroup": "", "resources": ["namespaces"], "objectNames": [ns]},
                                 {"namespaces": [ns], "objectSelectors": [{"matchLabels": {"app": "health"}}]}]}});
    apply(&Api::<BindingPolicy>::all(wds.clone()), policy).await?;
    Ok(())
}

/// One WEC's health counts on the policy: (healthy, progressing, degraded, unknown), and the
/// first object not healthy there.
fn wec_health(policy: Option<&BindingPolicy>, wec: &str) -> Option<((i64, i64, i64, i64), String)> {
    let health = policy?.status.as_ref()?.health.as_ref()?;
    let w = health.per_wec.iter().find(|w| w.wec == wec)?;
    Some((
        (w.healthy, w.progressing, w.degraded, w.unknown),
        w.first_unhealthy.clone(),
    ))
}

fn healthy_condition(policy: Option<&BindingPolicy>) -> Option<(String, String)> {
    let condition = policy?.status.as_ref()?.condition(condition_type::HEALTHY)?;
    Some((condition.status.clone(), condition.reason.clone()))
}

/// A Deployment whose pods no node of cluster1 takes (it selects a node label only cluster2's
/// node has) passes its progress deadline there: the policy counts it degraded on cluster1 and
/// healthy on cluster2 (`kubectl get bp` HEALTHY, `status.health`, condition `Healthy`),
/// `kubectl kubestellar status` shows those counts and what is degraded, and `why` names the health
/// link on cluster1. Once cluster1's node takes it too, the policy turns healthy; the time from
/// that label to the policy's `Healthy=True` is printed.
async fn an_object_that_cannot_run_is_degraded_where_it_fails(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "health")?;
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let key = node_label(&ctx);
    label_nodes(&ctx, &["cluster2"], &key, Some("yes")).await?;
    let stuck = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "stuck", "labels": {"app": "health"}},
        "spec": {"replicas": 1, "progressDeadlineSeconds": 2, "selector": {"matchLabels": {"app": "stuck"}},
                 "template": {"metadata": {"labels": {"app": "stuck"}},
                              "spec": {"nodeSelector": {&key: "yes"},
                                       "containers": [{"name": "app", "image": "nginx:1.27"}]}}}});
    let mut web = deployment(1);
    web["metadata"]["labels"]["app"] = json!("health");
    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    apply(&deployments, stuck).await?;
    apply(&deployments, web).await?;
    let policy = ctx.unique_name("health");
    bind_health(&wds, &policy, &ns).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let degraded_on_cluster1 = |p: Option<&BindingPolicy>| {
        wec_health(p, "cluster1").is_some_and(|(counts, first)| {
            counts == (2, 0, 1, 0) && first.contains("stuck") && first.contains("ProgressDeadlineExceeded")
        }) && wec_health(p, "cluster2").is_some_and(|(counts, _)| counts == (3, 0, 0, 0))
            && healthy_condition(p) == Some(("False".into(), "Degraded".into()))
    };
    wait_until(
        policies.clone(),
        &policy,
        "degraded on cluster1 only",
        DEADLINE,
        degraded_on_cluster1,
    )
    .await?;
    let listed = tools.kubectl("wds1", &["get", "bp", &policy])?;
    println!("$ kubectl get bp {policy}\n{listed}");
    anyhow::ensure!(
        listed
            .lines()
            .nth(1)
            .is_some_and(|row| row.split_whitespace().nth(6) == Some("5/6")),
        "HEALTHY is not 5/6:\n{listed}"
    );
    let status = tools.kubestellar(&["status", &policy])?;
    println!("$ kubectl kubestellar status {policy}\n{status}");
    let row = |wec: &str| {
        status
            .lines()
            .find(|l| l.split_whitespace().next() == Some(wec))
            .and_then(|l| l.split_whitespace().last().map(str::to_string))
    };
    anyhow::ensure!(
        row("cluster1").as_deref() == Some("2/3") && row("cluster2").as_deref() == Some("3/3"),
        "HEALTHY per WEC is not 2/3 and 3/3:\n{status}"
    );
    anyhow::ensure!(
        status.contains(&format!(
            "cluster1: apps/deployments {ns}/stuck: Degraded: Progressing: ProgressDeadlineExceeded"
        )),
        "status does not say what is degraded:\n{status}"
    );
    let why: Value =
        serde_json::from_str(&tools.kubestellar(&["why", "deployment/stuck", "-n", &ns, "-o", "json"])?)?;
    anyhow::ensure!(
        why["broken"]["link"] == "health" && why["broken"]["wec"] == "cluster1",
        "why does not name the health link on cluster1: {why:#}"
    );
    println!(
        "$ kubectl kubestellar why deployment/stuck -n {ns}\n{}",
        tools.kubestellar(&["why", "deployment/stuck", "-n", &ns])?
    );

    // `kubectl describe` shows the change: a warning on the Deployment naming cluster1.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(wds.clone(), &ns);
    let said = |reason: &'static str| {
        let events = events.clone();
        move || {
            let events = events.clone();
            async move {
                let listed = events.list(&Default::default()).await?;
                Ok(listed.items.iter().any(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("stuck")
                        && e.reason.as_deref() == Some(reason)
                        && e.note.as_deref().is_some_and(|n| n.contains("on cluster1"))
                }))
            }
        }
    };
    wait_for("a Degraded event on the Deployment", DEADLINE, said("Degraded")).await?;
    let labelled = std::time::Instant::now();
    label_nodes(&ctx, &["cluster1"], &key, Some("yes")).await?;
    let all_healthy = |p: Option<&BindingPolicy>| healthy_condition(p) == Some(("True".into(), "Healthy".into()));
    wait_until(policies, &policy, "healthy on both WECs", DEADLINE, all_healthy).await?;
    println!(
        "from the node label on cluster1 to Healthy=True on the policy: {:.2} s",
        labelled.elapsed().as_secs_f64()
    );
    wait_for("a Healthy event on the Deployment", DEADLINE, said("Healthy")).await?;
    label_nodes(&ctx, &["cluster1", "cluster2"], &key, None).await?;
    cleanup(&ctx, &[policy], &[], &ns).await
}

/// A Job waits for a node (cluster1's and cluster2's take it once labelled) and is progressing
/// until then; it completes and is healthy. A Job past its `activeDeadlineSeconds` fails and is
/// degraded. The WorkStatuses carry the same verdicts, and a singleton policy returns the Job's
/// status while it runs (upstream users report it coming only once the Job is done, #2436).
async fn a_job_is_progressing_until_it_completes_or_fails(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let key = node_label(&ctx);
    let job = |name: &str, selector: &str, deadline: Option<i64>| {
        let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"app": "health"}},
            "spec": {"backoffLimit": 0,
                     "template": {"spec": {"restartPolicy": "Never", "nodeSelector": {selector: "yes"},
                                           "containers": [{"name": "app", "image": "busybox:1.36"}]}}}});
        if let Some(seconds) = deadline {
            job["spec"]["activeDeadlineSeconds"] = json!(seconds);
        }
        job
    };
    let jobs: Api<Job> = Api::namespaced(wds.clone(), &ns);
    apply(&jobs, job("later", &key, None)).await?;
    apply(&jobs, job("doomed", &format!("{key}-never"), Some(2))).await?;
    let policy = ctx.unique_name("health");
    bind_health(&wds, &policy, &ns).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    // cluster1's status of the Job `later` comes back while it runs, not only once it is done.
    let singleton = format!("{policy}-s");
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": singleton},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                        "downsync": [{"apiGroup": "batch", "resources": ["jobs"], "namespaces": [ns],
                                      "objectNames": ["later"], "wantSingletonReportedState": true}]}}),
    )
    .await?;
    let returned = |j: Option<&Job>| j.and_then(|j| j.status.clone()).unwrap_or_default();
    wait_until(
        jobs.clone(),
        "later",
        "showing cluster1's running pod",
        DEADLINE,
        move |j: Option<&Job>| returned(j).active == Some(1),
    )
    .await?;
    let counts_everywhere = |wanted: (i64, i64, i64, i64)| {
        move |p: Option<&BindingPolicy>| {
            WECS.iter()
                .all(|wec| wec_health(p, wec).is_some_and(|(counts, _)| counts == wanted))
        }
    };
    wait_until(
        policies.clone(),
        &policy,
        "with one Job progressing and one degraded on each WEC",
        DEADLINE,
        counts_everywhere((1, 1, 1, 0)),
    )
    .await?;
    let reports: Api<WorkStatus> = Api::namespaced(ctx.client("its1").await?, "cluster1");
    let verdicts = |reports: &[WorkStatus]| -> std::collections::BTreeMap<String, String> {
        reports
            .iter()
            .filter(|r| r.spec.spec.source_ref.namespace == ns && r.spec.spec.source_ref.kind == "Job")
            .filter_map(|r| {
                let health = r.spec.health.as_ref()?;
                Some((
                    r.spec.spec.source_ref.name.clone(),
                    format!("{}: {}", health.verdict, health.reason),
                ))
            })
            .collect()
    };
    let said = verdicts(&reports.list(&Default::default()).await?.items);
    anyhow::ensure!(
        said.get("later").map(String::as_str) == Some("Progressing: running")
            && said
                .get("doomed")
                .is_some_and(|d| d.starts_with("Degraded: Failed: DeadlineExceeded")),
        "cluster1's WorkStatuses say {said:?}"
    );
    label_nodes(&ctx, &WECS, &key, Some("yes")).await?;
    wait_until(
        policies,
        &policy,
        "with the completed Job healthy on each WEC",
        DEADLINE,
        counts_everywhere((2, 0, 1, 0)),
    )
    .await?;
    wait_until(
        jobs,
        "later",
        "showing cluster1's completion",
        DEADLINE,
        move |j: Option<&Job>| returned(j).succeeded == Some(1),
    )
    .await?;
    label_nodes(&ctx, &WECS, &key, None).await?;
    cleanup(&ctx, &[policy, singleton], &[], &ns).await
}

/// A custom resource the built-in rules know nothing of is judged by the user's HealthRule for
/// its kind, on the status its WEC's operator writes (here by hand, `kubectl patch
/// --subresource=status` on cluster1): progressing until the operator says, degraded with the
/// rule's reason, healthy once the operator says so. A second rule for the kind says, in its
/// status, that it is not used.
async fn a_custom_resource_is_judged_by_its_health_rule(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "health-rule")?;
    let id = ctx.unique_name("health-rule");
    let group = format!("{id}.example.io");
    let crd_name = format!("gizmos.{group}");
    let label = format!("app.kubernetes.io/part-of: {id}");
    let crd = tools.scratch_file("yaml", &crd_yaml(&group, "gizmos", "Gizmo", &label))?;
    let rules = tools.scratch_file(
        "yaml",
        &format!(
            r#"apiVersion: control.kubestellar.io/v1alpha1
kind: HealthRule
metadata: {{name: {id}-a}}
spec:
  group: {group}
  kind: Gizmo
  checks:
  - verdict: Degraded
    when: "has(returned.status.state) && returned.status.state == 'broken'"
    reason: "'broken: ' + returned.status.detail"
  - verdict: Healthy
    when: "has(returned.status.state) && returned.status.state == 'ok'"
---
apiVersion: control.kubestellar.io/v1alpha1
kind: HealthRule
metadata: {{name: {id}-b}}
spec:
  group: {group}
  kind: Gizmo
  checks: [{{verdict: Healthy, when: "true"}}]
"#
        ),
    )?;
    let app = tools.scratch_file(
        "yaml",
        &(custom_object_yaml(&id, &group, "Gizmo", &label) + &policy_yaml(&id, "name: cluster1", &label)),
    )?;
    tools.apply_crd("wds1", &crd, &crd_name)?;
    tools.kubectl("wds1", &["apply", "-f", &rules])?;
    tools.kubectl("wds1", &["apply", "-f", &app])?;

    let wds = ctx.client("wds1").await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let first_unhealthy = |wanted: &'static str| {
        move |p: Option<&BindingPolicy>| wec_health(p, "cluster1").is_some_and(|(_, first)| first.contains(wanted))
    };
    wait_until(
        policies.clone(),
        &id,
        "with the Gizmo progressing by the rule",
        DEADLINE,
        first_unhealthy("Progressing: HealthRule"),
    )
    .await?;
    let set_status = |status: &str| tools.patch_status("cluster1", &id, &crd_name, "g1", status);
    set_status(r#"{"status": {"state": "broken", "detail": "no gears"}}"#)?;
    wait_until(
        policies.clone(),
        &id,
        "with the Gizmo degraded by the rule",
        DEADLINE,
        first_unhealthy("Degraded: broken: no gears"),
    )
    .await?;
    let gizmo = format!("{crd_name}/g1");
    let why: Value = serde_json::from_str(&tools.kubestellar(&["why", &gizmo, "-n", &id, "-o", "json"])?)?;
    anyhow::ensure!(
        why["healthRule"] == format!("{id}-a").as_str()
            && why["broken"]["link"] == "health"
            && why["broken"]["problem"] == "it is Degraded on cluster1: broken: no gears",
        "why does not give the rule's verdict: {why:#}"
    );
    set_status(r#"{"status": {"state": "ok"}}"#)?;
    let healthy = |p: Option<&BindingPolicy>| healthy_condition(p) == Some(("True".into(), "Healthy".into()));
    wait_until(policies, &id, "healthy by the rule", DEADLINE, healthy).await?;

    let health_rules: Api<HealthRule> = Api::all(wds);
    let errors = |rule: Option<&HealthRule>| rule.and_then(|r| r.status.as_ref()).map(|s| s.errors.clone());
    let unused = format!("HealthRule {id}-a judges Gizmo in group \"{group}\" already: this one is not used");
    wait_until(
        health_rules.clone(),
        &format!("{id}-b"),
        "said unused",
        DEADLINE,
        move |r: Option<&HealthRule>| errors(r) == Some(vec![unused.clone()]),
    )
    .await?;
    let used = wait_until(
        health_rules,
        &format!("{id}-a"),
        "with a status",
        DEADLINE,
        |r: Option<&HealthRule>| errors(r).is_some(),
    )
    .await?;
    anyhow::ensure!(
        errors(used.as_ref()) == Some(Vec::new()),
        "the rule used has errors: {used:?}"
    );

    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &app])?;
    tools.kubectl("wds1", &["delete", "-f", &rules])?;
    tools.kubectl("wds1", &["delete", "-f", &crd])?;
    Ok(())
}

/// A kind of the test's own (`gizmos.<id>.example.io`, with or without a status subresource) and
/// one object `g1` of it in the namespace `<id>`, sent by the policy `<id>` to the WECs that
/// `clusters` (matchLabels) selects, with the downsync flag `want`; applied to wds1.
struct CustomApp {
    id: String,
    crd_name: String,
    crd: String,
    app: String,
    resource: kube::discovery::ApiResource,
}

impl CustomApp {
    fn apply(
        ctx: &Ctx,
        tools: &Tools,
        prefix: &str,
        status_subresource: bool,
        clusters: &str,
        want: &str,
    ) -> anyhow::Result<CustomApp> {
        let id = ctx.unique_name(prefix);
        let group = format!("{id}.example.io");
        let crd_name = format!("gizmos.{group}");
        let label = format!("app.kubernetes.io/part-of: {id}");
        let mut crd = crd_yaml(&group, "gizmos", "Gizmo", &label);
        if !status_subresource {
            crd = crd.replace("    subresources: {status: {}}\n", "");
            anyhow::ensure!(
                !crd.contains("subresources"),
                "the CRD still declares a status subresource"
            );
        }
        let policy = format!(
            r#"---
apiVersion: control.kubestellar.io/v1alpha1
kind: BindingPolicy
metadata: {{name: {id}}}
spec:
  clusterSelectors: [{{matchLabels: {{{clusters}}}}}]
  downsync: [{{objectSelectors: [{{matchLabels: {{{label}}}}}], {want}: true}}]
"#
        );
        let crd = tools.scratch_file("yaml", &crd)?;
        let app = tools.scratch_file("yaml", &(custom_object_yaml(&id, &group, "Gizmo", &label) + &policy))?;
        tools.apply_crd("wds1", &crd, &crd_name)?;
        tools.kubectl("wds1", &["apply", "-f", &app])?;
        let gvk = kube::api::GroupVersionKind::gvk(&group, "v1", "Gizmo");
        Ok(CustomApp {
            id,
            crd_name,
            crd,
            app,
            resource: kube::discovery::ApiResource::from_gvk(&gvk),
        })
    }

    /// Its objects in `client`'s cluster.
    fn objects(&self, client: Client) -> Api<kube::api::DynamicObject> {
        Api::namespaced_with(client, &self.id, &self.resource)
    }

    fn delete(&self, tools: &Tools) -> anyhow::Result<()> {
        tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &self.app])?;
        tools.kubectl("wds1", &["delete", "-f", &self.crd])?;
        Ok(())
    }
}

/// A custom resource whose CRD declares no status subresource keeps `.status` in the object: the
/// status its WEC has is returned into the WDS object (singleton) all the same, and that write,
/// which raises the WDS object's generation, delivers nothing (the ManifestWork stays at its
/// generation) and so never wipes the WEC's status (OCM's update replaces such an object whole).
/// A change of its content is delivered, judged against the new content, and its status returned
/// again; `why` says which content each WEC runs.
async fn a_custom_resource_without_a_status_subresource_returns_its_status(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "status-in-object")?;
    let app = CustomApp::apply(
        &ctx,
        &tools,
        "in-object",
        false,
        "name: cluster1",
        "wantSingletonReportedState",
    )?;
    let (id, crd_name) = (&app.id, &app.crd_name);
    let gizmos = |client: Client| app.objects(client);
    let (wds, wec) = (ctx.client("wds1").await?, ctx.client("cluster1").await?);
    let status_is = |wanted: Value| {
        move |o: Option<&kube::api::DynamicObject>| o.and_then(|o| o.data.get("status")) == Some(&wanted)
    };
    let size_is =
        |size: i64| move |o: Option<&kube::api::DynamicObject>| o.is_some_and(|o| o.data["spec"]["size"] == size);
    wait_until(gizmos(wec.clone()), "g1", "delivered to cluster1", DEADLINE, size_is(3)).await?;

    // Its controller on the WEC writes its status into the object itself.
    let set_status = |status: Value| {
        let patch = json!({"status": status}).to_string();
        tools.kubectl(
            "cluster1",
            &["patch", "-n", id, crd_name, "g1", "--type=merge", "-p", &patch],
        )
    };
    set_status(json!({"state": "ok", "n": 1}))?;
    let started = std::time::Instant::now();
    wait_until(
        gizmos(wds.clone()),
        "g1",
        "its status returned",
        DEADLINE,
        status_is(json!({"state": "ok", "n": 1})),
    )
    .await?;
    println!(
        "the first status returned into the object {:.2} s after the WEC's write (the agent's read access to a new API group comes first)",
        started.elapsed().as_secs_f64()
    );

    let its = ctx.client("its1").await?;
    let works: Api<ks_shared::ocm::ManifestWork> = Api::namespaced(its, "cluster1");
    let by_policy =
        kube::api::ListParams::default().labels(&format!("{}={id}", ks_shared::names::ORIGIN_BINDING_LABEL));
    let generations = || async {
        let listed = works.list(&by_policy).await?;
        anyhow::Ok(
            listed
                .items
                .iter()
                .map(|w| (w.metadata.name.clone(), w.metadata.generation))
                .collect::<Vec<_>>(),
        )
    };
    let delivered = generations().await?;
    anyhow::ensure!(!delivered.is_empty(), "no ManifestWork of the policy");
    set_status(json!({"state": "ok", "n": 2}))?;
    let started = std::time::Instant::now();
    wait_until(
        gizmos(wds.clone()),
        "g1",
        "its new status returned",
        DEADLINE,
        status_is(json!({"state": "ok", "n": 2})),
    )
    .await?;
    println!(
        "a new status returned into the object {:.2} s after the WEC's write",
        started.elapsed().as_secs_f64()
    );
    let returned = gizmos(wds.clone()).get("g1").await?;
    anyhow::ensure!(
        returned.metadata.generation > Some(1),
        "the status was not written into the object (generation {:?})",
        returned.metadata.generation
    );
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let healthy = |p: Option<&BindingPolicy>| healthy_condition(p) == Some(("True".into(), "Healthy".into()));
    wait_until(policies.clone(), id, "healthy", DEADLINE, healthy).await?;
    anyhow::ensure!(
        generations().await? == delivered,
        "a status returned was delivered again"
    );
    let on_wec = gizmos(wec.clone()).get("g1").await?;
    anyhow::ensure!(
        on_wec.data.get("status") == Some(&json!({"state": "ok", "n": 2})),
        "the WEC's status was not kept: {on_wec:?}"
    );
    let gizmo = format!("{crd_name}/g1");
    let why: Value = serde_json::from_str(&tools.kubestellar(&["why", &gizmo, "-n", id, "-o", "json"])?)?;
    anyhow::ensure!(
        why["wecs"][0]["contentCurrent"] == true && why["broken"].is_null(),
        "why does not see cluster1 run the current content: {why:#}"
    );

    // A new content is delivered, and its status returned once the WEC's controller writes one.
    tools.kubectl(
        "wds1",
        &[
            "patch",
            "-n",
            id,
            crd_name,
            "g1",
            "--type=merge",
            "-p",
            r#"{"spec": {"size": 4}}"#,
        ],
    )?;
    wait_until(
        gizmos(wec.clone()),
        "g1",
        "the new content delivered",
        DEADLINE,
        size_is(4),
    )
    .await?;
    anyhow::ensure!(generations().await? != delivered, "the new content was not delivered");
    set_status(json!({"state": "ok", "n": 3}))?;
    wait_until(
        gizmos(wds.clone()),
        "g1",
        "the new content's status returned",
        DEADLINE,
        status_is(json!({"state": "ok", "n": 3})),
    )
    .await?;
    wait_until(policies, id, "healthy on the new content", DEADLINE, healthy).await?;
    let runs_current = || async {
        let why: Value = serde_json::from_str(&tools.kubestellar(&["why", &gizmo, "-n", id, "-o", "json"])?)?;
        anyhow::Ok(why["wecs"][0]["contentCurrent"] == true)
    };
    wait_for("why to see cluster1 run the new content", DEADLINE, runs_current).await?;

    app.delete(&tools)
}

/// A custom resource sent to both WECs with multi-WEC status: where the WECs disagree on a field
/// of a kind without aggregation rules of its own (its `phase`), the aggregate says what the
/// least healthy WEC says (its `Ready` condition `False` makes it Degraded there), and follows it
/// back once both are healthy.
async fn a_multi_wec_aggregate_says_what_the_least_healthy_wecs_say(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "aggregate-health")?;
    let app = CustomApp::apply(
        &ctx,
        &tools,
        "agg-health",
        true,
        "location-group: edge",
        "wantMultiWECReportedState",
    )?;
    let (id, crd_name) = (&app.id, &app.crd_name);
    let gizmos = |client: Client| app.objects(client);
    for wec in WECS {
        let there = |o: Option<&kube::api::DynamicObject>| o.is_some();
        wait_until(
            gizmos(ctx.client(wec).await?),
            "g1",
            &format!("delivered to {wec}"),
            DEADLINE,
            there,
        )
        .await?;
    }
    let set_status = |wec: &str, phase: &str, ready: &str| {
        let status =
            json!({"status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready, "reason": phase}]}});
        tools.patch_status(wec, id, crd_name, "g1", &status.to_string())
    };
    let aggregate_is = |phase: &'static str, ready: &'static str| {
        move |o: Option<&kube::api::DynamicObject>| {
            let status = o.and_then(|o| o.data.get("status"));
            status.is_some_and(|s| s["phase"] == phase && s["conditions"][0]["status"] == ready)
        }
    };
    set_status("cluster1", "Running", "True")?;
    set_status("cluster2", "Failed", "False")?;
    let wds = ctx.client("wds1").await?;
    wait_until(
        gizmos(wds.clone()),
        "g1",
        "the failed WEC's phase",
        DEADLINE,
        aggregate_is("Failed", "False"),
    )
    .await?;
    set_status("cluster2", "Running", "True")?;
    wait_until(
        gizmos(wds),
        "g1",
        "both WECs' phase",
        DEADLINE,
        aggregate_is("Running", "True"),
    )
    .await?;

    app.delete(&tools)
}

/// On cluster1's real node (containerd and a kubelet, `ks_tests::stack::node`), a Deployment of
/// the test workload really runs: its readiness probe passes and the WDS Deployment's returned
/// status says 1 ready; a Pod whose container exits at once crash-loops there, and the policy,
/// `kubectl kubestellar status` and `why` say it is Degraded on cluster1 by `CrashLoopBackOff`;
/// one over its memory limit is OOMKilled there, and Degraded too.
async fn a_real_node_shows_real_readiness_and_crash_loops(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "real-node")?;
    let real = node::node_name("cluster1");
    let nodes: Api<Node> = Api::all(ctx.client("cluster1").await?);
    if nodes.get_opt(&real).await?.is_none() {
        anyhow::bail!(
            "the stack has no real node {real}: {}",
            node::cannot_run().unwrap_or_else(|| "see `make up`'s output".into())
        );
    }
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    // Pulled from the stack's registry.
    let image = registry::image_ref(node::POD_IMAGE);
    // What puts a Pod on the real node, and only there.
    let placement = json!({
        "nodeSelector": {node::REAL_NODE_LABEL: "true"},
        "tolerations": [{"key": node::REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    });
    let container = |name: &str, args: Value| {
        json!({"name": name, "image": image, "imagePullPolicy": "Always", "args": args,
               "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true,
                                   "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}})
    };
    let mut serving = container("web", json!(["serve", "--port", "8080"]));
    serving["readinessProbe"] = json!({"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1});
    let mut pod_spec = placement.clone();
    pod_spec["containers"] = json!([serving]);
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec}}});
    let pod = |name: &str, container: Value| {
        let mut spec = placement.clone();
        spec["containers"] = json!([container]);
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}}, "spec": spec})
    };
    // Over its memory limit: the kernel kills it, the kubelet says OOMKilled.
    let mut eating = container("eater", json!(["eat", "--mebibytes", "64"]));
    eating["resources"] = json!({"limits": {"memory": "16Mi"}, "requests": {"memory": "16Mi"}});
    apply(&Api::<Deployment>::namespaced(wds.clone(), &ns), deployment).await?;
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(wds.clone(), &ns);
    apply(&pods, pod("crasher", container("crasher", json!(["crash"])))).await?;
    apply(&pods, pod("eater", eating)).await?;
    let policy = ctx.unique_name("real");
    bind(
        &wds,
        &policy,
        &ns,
        only("cluster1"),
        json!({"wantSingletonReportedState": true}),
    )
    .await?;

    let deployments: Api<Deployment> = Api::namespaced(wds.clone(), &ns);
    let started = std::time::Instant::now();
    let ready = |d: Option<&Deployment>| {
        let status = d.and_then(|d| d.status.as_ref());
        status.and_then(|s| s.ready_replicas) == Some(1) && status.and_then(|s| s.available_replicas) == Some(1)
    };
    wait_web(&deployments, "1 replica ready on the real node", ready).await?;
    println!(
        "ready on the real node, its status returned, {:.1} s after the policy",
        started.elapsed().as_secs_f64()
    );
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let crash_looping = |p: Option<&BindingPolicy>| {
        wec_health(p, "cluster1").is_some_and(|((_, _, degraded, _), first)| {
            degraded == 2 && first.contains("crasher") && first.contains("CrashLoopBackOff")
        })
    };
    wait_until(
        policies,
        &policy,
        "the crasher and the eater degraded on cluster1",
        DEADLINE,
        crash_looping,
    )
    .await?;
    let status = tools.kubestellar(&["status", &policy])?;
    println!("$ kubectl kubestellar status {policy}\n{status}");
    anyhow::ensure!(
        status.contains("CrashLoopBackOff"),
        "status does not say it crash-loops"
    );
    // A crash loop passes through a moment of running (ready, without a readiness probe):
    // `why` reads the WorkStatus as it is at that moment.
    let names_the_crash = || async {
        let (broken, why) = tools.kubestellar_answer(&["why", "pod/crasher", "-n", &ns, "-o", "json"])?;
        let why: Value = serde_json::from_str(&why)?;
        let problem = why["broken"]["problem"].as_str().unwrap_or_default();
        // A broken link is exit status 3, for scripts.
        anyhow::Ok(
            broken
                && why["broken"]["link"] == "health"
                && why["broken"]["wec"] == "cluster1"
                && problem.starts_with("it is Degraded on cluster1: container crasher"),
        )
    };
    wait_for("why to name the crash on cluster1", DEADLINE, names_the_crash).await?;
    let on_wec = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(ctx.client("cluster1").await?, &ns);
    let oom_killed = || async {
        let eater = on_wec.get("eater").await?;
        let statuses = eater.status.and_then(|s| s.container_statuses).unwrap_or_default();
        anyhow::Ok(statuses.iter().any(|c| {
            [c.state.as_ref(), c.last_state.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|s| s.terminated.as_ref())
                .any(|t| t.reason.as_deref() == Some("OOMKilled"))
        }))
    };
    wait_for("the eater OOMKilled on the real node", DEADLINE, oom_killed).await?;
    cleanup(&ctx, &[policy], &[], &ns).await
}
