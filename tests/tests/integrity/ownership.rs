//! ManifestWorks the hub did not write: one found under the name the hub would give its own is
//! left alone and reported as a name conflict, never taken over; WDSes whose names nest do not
//! share names; and fields the hub stops sending are gone, whichever of its managers (this
//! version's or an earlier one's) wrote them first.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::{Binding, BindingPolicy};
use ks_shared::names::{ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL};
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, StackTest, apply, wait_until};
use ks_tests::stack_test;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(90);
const PATH: &[&str] = &["hub-wds1", "ocm-agent-cluster1"];
const WDS: &str = "wds1";
const MAILBOX: &str = "cluster1";
/// The field manager of every hub's transport before it had one per WDS.
const SHARED_MANAGER: &str = "transport-controller";

pub fn tests() -> Vec<StackTest> {
    vec![
        stack_test!(an_admins_manifestwork_under_our_name_is_left_alone, PATH),
        stack_test!(a_wds_whose_name_nests_in_ours_keeps_its_manifestwork, PATH),
        stack_test!(create_only_turned_off_reaches_the_wec, PATH),
        stack_test!(an_upgrade_renames_nothing_and_leaves_no_field_stuck, PATH),
    ]
}

/// The names a hub of this version, or one before it, gives the first ManifestWork of `policy`.
fn first_shard_names(policy: &str) -> [String; 2] {
    [format!("{policy}-{WDS}-0"), format!("{policy}.{WDS}.0")]
}

fn config_map(name: &str, namespace: &str, labels: &Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": data})
}

fn manifest_work(name: &str, labels: Value, manifests: Value, configs: Value) -> Value {
    json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
           "metadata": {"name": name, "namespace": MAILBOX, "labels": labels},
           "spec": {"workload": {"manifests": manifests}, "manifestConfigs": configs}})
}

/// A WDS namespace labelled `selector`, holding the ConfigMap `web` labelled so too: what a
/// policy selecting `selector` sends.
async fn workload(ctx: &Ctx, data: Value) -> anyhow::Result<(String, Value)> {
    let wds = ctx.client(WDS).await?;
    let (ns, selector) = ctx.selected_namespace(WDS).await?;
    apply(
        &Api::<ConfigMap>::namespaced(wds, &ns),
        config_map("web", &ns, &selector, data),
    )
    .await?;
    Ok((ns, selector))
}

/// Applies the policy `name`, sending what `selector` selects to cluster1.
async fn send(ctx: &Ctx, name: &str, selector: &Value, create_only: bool) -> anyhow::Result<()> {
    let policies: Api<BindingPolicy> = Api::all(ctx.client(WDS).await?);
    let downsync = json!([{"objectSelectors": [{"matchLabels": selector}], "createOnly": create_only}]);
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": name},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": MAILBOX}}], "downsync": downsync}}),
    )
    .await?;
    Ok(())
}

/// Deletes the policy and waits for its Binding to go (the transport has removed its
/// ManifestWorks by then), then the WDS namespace.
async fn withdraw(ctx: &Ctx, policy: &str, ns: &str) -> anyhow::Result<()> {
    let wds = ctx.client(WDS).await?;
    Api::<BindingPolicy>::all(wds.clone())
        .delete(policy, &DeleteParams::default())
        .await?;
    let gone = |b: Option<&Binding>| b.is_none();
    wait_until(Api::<Binding>::all(wds), policy, "deleted", DEADLINE, gone).await?;
    ctx.delete_namespace(WDS, ns).await
}

/// The field managers of the transport (any version's) among a ManifestWork's.
fn transport_managers(work: &ManifestWork) -> Vec<String> {
    work.managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .filter(|m| m.starts_with(SHARED_MANAGER))
        .collect()
}

/// What must stay as it is of a ManifestWork the hub did not write.
#[derive(Debug, PartialEq)]
struct Untouched {
    uid: Option<String>,
    generation: Option<i64>,
    labels: BTreeMap<String, String>,
    manifests: Value,
    transport_managers: Vec<String>,
}

fn untouched(work: &ManifestWork) -> Untouched {
    Untouched {
        uid: work.uid(),
        generation: work.metadata.generation,
        labels: work.labels().clone(),
        manifests: serde_json::to_value(&work.spec.workload.manifests).unwrap_or_default(),
        transport_managers: transport_managers(work),
    }
}

/// The ConfigMaps `names` of `namespace` on cluster1, present or not.
async fn on_wec(ctx: &Ctx, namespace: &str, names: &[String]) -> anyhow::Result<BTreeMap<String, bool>> {
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client(MAILBOX).await?, namespace);
    let mut present = BTreeMap::new();
    for name in names {
        present.insert(name.clone(), cms.get_opt(name).await?.is_some());
    }
    Ok(present)
}

/// Defect: the hub's create of its ManifestWork got 409 and it force-applied over the admin's,
/// so OCM deleted the admin's ConfigMap from the WEC. Each name the hub could give the policy's
/// first ManifestWork holds an admin's ConfigMap.
async fn an_admins_manifestwork_under_our_name_is_left_alone(ctx: Ctx) -> anyhow::Result<()> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, MAILBOX);
    let admins = ctx.namespace(MAILBOX).await?;
    let policy = ctx.unique_name("own");
    let names = first_shard_names(&policy);
    let cms: Vec<String> = (0..names.len()).map(|i| format!("admin-cm-{i}")).collect();
    let mut before = Vec::new();
    for (name, cm) in names.iter().zip(&cms) {
        let manifests = json!([config_map(cm, &admins, &json!({}), json!({"owner": "admin"}))]);
        before.push(apply(&works, manifest_work(name, json!({}), manifests, json!([]))).await?);
    }
    let admin_cms: Api<ConfigMap> = Api::namespaced(ctx.client(MAILBOX).await?, &admins);
    for cm in &cms {
        wait_until(admin_cms.clone(), cm, "applied", DEADLINE, |c: Option<&ConfigMap>| {
            c.is_some()
        })
        .await?;
    }

    let (ns, selector) = workload(&ctx, json!({"k": "v"})).await?;
    send(&ctx, &policy, &selector, false).await?;
    let policies: Api<BindingPolicy> = Api::all(ctx.client(WDS).await?);
    let conflict = format!("name conflict: ManifestWork {MAILBOX}/");
    let reported = |p: Option<&BindingPolicy>| {
        p.and_then(|p| p.status.as_ref())
            .is_some_and(|s| s.errors.iter().any(|e| e.contains(&conflict)))
    };
    if let Err(err) = wait_until(
        policies.clone(),
        &policy,
        "reporting a name conflict",
        DEADLINE,
        reported,
    )
    .await
    {
        let mut now = Vec::new();
        for name in &names {
            now.push(works.get_opt(name).await?.map(|w| untouched(&w)));
        }
        anyhow::bail!(
            "{err:#}; the admin's ConfigMaps on {MAILBOX}: {:?}; the admin's ManifestWorks now: {now:?}",
            on_wec(&ctx, &admins, &cms).await?
        );
    }
    let errors = policies.get(&policy).await?.status.unwrap_or_default().errors;
    for (work, name) in before.iter().zip(&names) {
        let now = works.get(name).await?;
        anyhow::ensure!(
            untouched(&now) == untouched(work),
            "the admin's ManifestWork {name} changed: {:?} -> {:?} (policy errors {errors:?})",
            untouched(work),
            untouched(&now)
        );
    }
    let present = on_wec(&ctx, &admins, &cms).await?;
    anyhow::ensure!(
        present.values().all(|p| *p),
        "the admin's ConfigMaps on {MAILBOX}: {present:?}"
    );

    withdraw(&ctx, &policy, &ns).await?;
    for name in &names {
        works.delete(name, &DeleteParams::default()).await?;
    }
    ctx.delete_namespace(MAILBOX, &admins).await
}

/// Defect: `<policy>-<wds>-<shard>` named policy `x-a` of WDS `wds1` and policy `x` of WDS
/// `a-wds1` alike, and the hub took the other WDS's ManifestWork over.
async fn a_wds_whose_name_nests_in_ours_keeps_its_manifestwork(ctx: Ctx) -> anyhow::Result<()> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, MAILBOX);
    let theirs_ns = ctx.namespace(MAILBOX).await?;
    let their_policy = ctx.unique_name("nest");
    let (their_wds, policy) = (format!("a-{WDS}"), format!("{their_policy}-a"));
    // As a hub of the WDS `a-wds1` names its first ManifestWork of `their_policy`.
    let theirs = format!("{their_policy}-{their_wds}-0");
    let labels = json!({ORIGIN_BINDING_LABEL: their_policy, ORIGIN_WDS_LABEL: their_wds});
    let manifests = json!([config_map("theirs", &theirs_ns, &json!({}), json!({"owner": "a-wds1"}))]);
    let before = apply(&works, manifest_work(&theirs, labels, manifests, json!([]))).await?;
    let their_cms: Api<ConfigMap> = Api::namespaced(ctx.client(MAILBOX).await?, &theirs_ns);
    let present = |c: Option<&ConfigMap>| c.is_some();
    wait_until(their_cms.clone(), "theirs", "applied", DEADLINE, present).await?;

    let (ns, selector) = workload(&ctx, json!({"k": "v"})).await?;
    send(&ctx, &policy, &selector, false).await?;
    let ours: Api<ConfigMap> = Api::namespaced(ctx.client(MAILBOX).await?, &ns);
    wait_until(ours, "web", "delivered", DEADLINE, present).await?;
    let now = works.get(&theirs).await?;
    anyhow::ensure!(
        untouched(&now) == untouched(&before),
        "WDS {their_wds}'s ManifestWork {theirs} changed: {:?} -> {:?}",
        untouched(&before),
        untouched(&now)
    );
    anyhow::ensure!(
        their_cms.get_opt("theirs").await?.is_some(),
        "WDS {their_wds}'s ConfigMap was deleted from {MAILBOX}"
    );

    withdraw(&ctx, &policy, &ns).await?;
    works.delete(&theirs, &DeleteParams::default()).await?;
    ctx.delete_namespace(MAILBOX, &theirs_ns).await
}

/// The ManifestWorks of `policy` in cluster1.
async fn works_of(ctx: &Ctx, policy: &str) -> anyhow::Result<Vec<ManifestWork>> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, MAILBOX);
    let labelled = ListParams::default().labels(&format!("{ORIGIN_BINDING_LABEL}={policy},{ORIGIN_WDS_LABEL}={WDS}"));
    Ok(works.list(&labelled).await?.items)
}

/// Turns createOnly off for `policy` and changes the ConfigMap in the WDS: the change must
/// reach cluster1, so no ManifestWork may keep its createOnly option.
async fn create_only_off_delivers_updates(ctx: &Ctx, policy: &str, ns: &str, selector: &Value) -> anyhow::Result<()> {
    send(ctx, policy, selector, false).await?;
    let wds_cms: Api<ConfigMap> = Api::namespaced(ctx.client(WDS).await?, ns);
    apply(&wds_cms, config_map("web", ns, selector, json!({"k": "updated"}))).await?;
    let on_wec: Api<ConfigMap> = Api::namespaced(ctx.client(MAILBOX).await?, ns);
    let updated = |c: Option<&ConfigMap>| {
        c.and_then(|c| c.data.as_ref())
            .is_some_and(|d| d.get("k").map(String::as_str) == Some("updated"))
    };
    if let Err(err) = wait_until(on_wec, "web", "updated", DEADLINE, updated).await {
        let configs: Vec<(String, Value, Vec<String>)> = works_of(ctx, policy)
            .await?
            .iter()
            .map(|w| {
                let configs = serde_json::to_value(&w.spec.manifest_configs).unwrap_or_default();
                (w.name_any(), configs, transport_managers(w))
            })
            .collect();
        anyhow::bail!("{err:#}; the policy's ManifestWorks (name, manifestConfigs, managers): {configs:?}");
    }
    Ok(())
}

/// Defect: a ManifestWork created (POST) with a createOnly option and later applied without it
/// kept it: the creation's managedFields entry still owned it.
async fn create_only_turned_off_reaches_the_wec(ctx: Ctx) -> anyhow::Result<()> {
    let policy = ctx.unique_name("create-only");
    let (ns, selector) = workload(&ctx, json!({"k": "first"})).await?;
    send(&ctx, &policy, &selector, true).await?;
    let on_wec: Api<ConfigMap> = Api::namespaced(ctx.client(MAILBOX).await?, &ns);
    wait_until(on_wec, "web", "delivered", DEADLINE, |c: Option<&ConfigMap>| {
        c.is_some()
    })
    .await?;
    create_only_off_delivers_updates(&ctx, &policy, &ns, &selector).await?;
    withdraw(&ctx, &policy, &ns).await
}

/// A hub upgraded from one that named ManifestWorks `<policy>-<wds>-<shard>` and wrote them as
/// `transport-controller`: it writes the existing one under its name (an upgrade renames
/// nothing), as its own field manager, and what it stops sending goes although the earlier
/// manager wrote it too.
async fn an_upgrade_renames_nothing_and_leaves_no_field_stuck(ctx: Ctx) -> anyhow::Result<()> {
    let policy = ctx.unique_name("upgraded");
    let (ns, selector) = workload(&ctx, json!({"k": "first"})).await?;
    // As the earlier hub created it: POST as `transport-controller`, createOnly.
    let [earlier, _] = first_shard_names(&policy);
    let labels = json!({ORIGIN_BINDING_LABEL: policy, ORIGIN_WDS_LABEL: WDS});
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    let manifests = json!([namespace, config_map("web", &ns, &selector, json!({"k": "first"}))]);
    let configs = json!([{"resourceIdentifier": {"group": "", "resource": "configmaps", "name": "web", "namespace": ns},
                          "updateStrategy": {"type": "CreateOnly"}}]);
    let work: ManifestWork = serde_json::from_value(manifest_work(&earlier, labels, manifests, configs))?;
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, MAILBOX);
    let params = PostParams {
        field_manager: Some(SHARED_MANAGER.into()),
        ..Default::default()
    };
    let created = works.create(&params, &work).await?;
    // The hub's watch of ManifestWorks shows it long before the policy's Binding exists.
    send(&ctx, &policy, &selector, true).await?;
    let rewritten =
        |w: Option<&ManifestWork>| w.is_some_and(|w| transport_managers(w).iter().any(|m| m != SHARED_MANAGER));
    let ours = wait_until(works.clone(), &earlier, "written by this hub", DEADLINE, rewritten).await?;
    anyhow::ensure!(
        ours.as_ref().and_then(|w| w.uid()) == created.uid(),
        "the ManifestWork was replaced"
    );
    let names: Vec<String> = works_of(&ctx, &policy).await?.iter().map(|w| w.name_any()).collect();
    anyhow::ensure!(names == [earlier.clone()], "the policy's ManifestWorks: {names:?}");
    create_only_off_delivers_updates(&ctx, &policy, &ns, &selector).await?;
    withdraw(&ctx, &policy, &ns).await
}
