//! The transport controller (in ks-hub, run by the stack for wds1) through the real OCM work
//! agent: selected objects reach the WECs transformed, follow updates, respect createOnly and
//! CustomTransforms, move when a policy is retargeted, and leave when the policy goes; per-WEC
//! templates follow each WEC's properties; ManifestWorks are sharded by count and size.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use ks_shared::api::{Binding, BindingPolicy, CustomTransform};
use ks_shared::names;
use ks_shared::ocm::ManifestWork;
use ks_tests::harness::{Ctx, apply, run, wait_until};
use ks_tests::stack::wait_for;
use ks_tests::stack_test;
use ks_tests::tools::Tools;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::wait::conditions;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(90);
const PATH: &[&str] = &["hub-wds1", "ocm-agent-cluster1", "ocm-agent-cluster2"];

ks_tests::stack_main!(
    run,
    vec![
        stack_test!(objects_reach_wecs_follow_updates_and_leave, PATH),
        stack_test!(create_only_and_custom_transforms, PATH),
        stack_test!(templates_follow_wec_properties, PATH),
        stack_test!(sharding_and_generated_names, PATH),
        stack_test!(rejected_manifestwork_is_reported, PATH),
        stack_test!(an_object_a_wec_cannot_apply_is_told_on_it, PATH),
        stack_test!(a_template_bomb_is_an_error_not_an_outage, PATH),
    ]
);

/// Labels a WDS namespace so that the test's policy selects it with its objects.
async fn label_namespace(wds: &kube::Client, ns: &str, labels: &Value) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(wds.clone());
    let patch = json!({"metadata": {"labels": labels}});
    namespaces
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn deployment(replicas: i32, labels: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn policy(name: &str, clusters: Value, downsync: Value) -> Value {
    json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy", "metadata": {"name": name},
           "spec": {"clusterSelectors": clusters, "downsync": downsync}})
}

/// Applies the policy `name`, sending the objects labelled `selector` to the WECs whose labels
/// match `clusters`.
async fn send(wds: &kube::Client, name: &str, clusters: Value, selector: &Value) -> anyhow::Result<()> {
    let downsync = json!([{"objectSelectors": [{"matchLabels": selector}]}]);
    apply(
        &Api::<BindingPolicy>::all(wds.clone()),
        policy(name, json!([{"matchLabels": clusters}]), downsync),
    )
    .await?;
    Ok(())
}

fn replicas_are(n: i32) -> impl Fn(Option<&Deployment>) -> bool {
    move |d| d.and_then(|d| d.spec.as_ref()).and_then(|s| s.replicas) == Some(n)
}

async fn objects_reach_wecs_follow_updates_and_leave(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    apply(
        &Api::<Deployment>::namespaced(wds.clone(), &ns),
        deployment(1, selector.clone()),
    )
    .await?;
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": selector},
                         "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]}});
    apply(&Api::<Service>::namespaced(wds.clone(), &ns), service).await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let name = format!("{ns}-edge");
    send(&wds, &name, json!({"location-group": "edge"}), &selector).await?;

    for wec in ["cluster1", "cluster2"] {
        let client = ctx.client(wec).await?;
        let available =
            |d: Option<&Deployment>| d.and_then(|d| d.status.as_ref()).and_then(|s| s.available_replicas) == Some(1);
        wait_until(
            Api::<Deployment>::namespaced(client.clone(), &ns),
            "web",
            "available",
            DEADLINE,
            available,
        )
        .await?;
        // The NodePort Service was accepted after its cluster-assigned fields were dropped.
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        wait_until(services, "web", "present", DEADLINE, |s: Option<&Service>| s.is_some()).await?;
    }

    // An update in the WDS reaches both WECs.
    apply(
        &Api::<Deployment>::namespaced(wds.clone(), &ns),
        deployment(2, selector.clone()),
    )
    .await?;
    for wec in ["cluster1", "cluster2"] {
        let deployments = Api::<Deployment>::namespaced(ctx.client(wec).await?, &ns);
        wait_until(deployments, "web", "scaled to 2", DEADLINE, replicas_are(2)).await?;
    }

    // Retargeting moves the objects: cluster2 only.
    send(&wds, &name, json!({"name": "cluster2"}), &selector).await?;
    let on_cluster1 = Api::<Deployment>::namespaced(ctx.client("cluster1").await?, &ns);
    let uid = on_cluster1.get("web").await?.metadata.uid.unwrap_or_default();
    wait_until(
        on_cluster1,
        "web",
        "removed from cluster1",
        DEADLINE,
        conditions::is_deleted(&uid),
    )
    .await?;

    // Deleting the policy removes everything from the WECs.
    policies.delete(&name, &DeleteParams::default()).await?;
    let on_cluster2 = Api::<Deployment>::namespaced(ctx.client("cluster2").await?, &ns);
    let uid = on_cluster2.get("web").await?.metadata.uid.unwrap_or_default();
    wait_until(
        on_cluster2,
        "web",
        "removed from cluster2",
        DEADLINE,
        conditions::is_deleted(&uid),
    )
    .await?;
    ctx.delete_namespace("wds1", &ns).await
}

async fn create_only_and_custom_transforms(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    // A label key of this run only: CustomTransforms apply to every Deployment in the WDS.
    let owner = format!("owner-{}", std::process::id());
    let mut labels = selector.clone();
    labels[owner.as_str()] = json!("team-a");
    let wds_deployments = Api::<Deployment>::namespaced(wds.clone(), &ns);
    apply(&wds_deployments, deployment(1, labels.clone())).await?;

    // The CustomTransform drops the `owner` label on delivery.
    let transforms: Api<CustomTransform> = Api::all(wds.clone());
    let transform = format!("{ns}-drop-owner");
    apply(
        &transforms,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
        "metadata": {"name": transform}, "spec": {"apiGroup": "apps", "resource": "deployments",
        "remove": [format!("$.metadata.labels[\"{owner}\"]")]}}),
    )
    .await?;

    // A second one for the same group/resource with a bad path: both are reported.
    let bad = format!("{ns}-bad");
    apply(
        &transforms,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
        "metadata": {"name": bad}, "spec": {"apiGroup": "apps", "resource": "deployments", "remove": ["spec"]}}),
    )
    .await?;
    let reported = |t: Option<&CustomTransform>| {
        t.and_then(|t| t.status.as_ref()).is_some_and(|s| {
            s.errors.iter().any(|e| e.starts_with("Error in spec.remove[0]"))
                && s.warnings
                    .iter()
                    .any(|w| w.contains("multiple CustomTransform objects specify the same GroupResource"))
        })
    };
    wait_until(
        transforms.clone(),
        &bad,
        "reporting its error and the shared GroupResource",
        DEADLINE,
        reported,
    )
    .await?;
    transforms.delete(&bad, &DeleteParams::default()).await?;

    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let name = format!("{ns}-create-only");
    let downsync = json!([{"objectSelectors": [{"matchLabels": selector}], "createOnly": true}]);
    apply(
        &policies,
        policy(&name, json!([{"matchLabels": {"name": "cluster1"}}]), downsync),
    )
    .await?;

    let wec = Api::<Deployment>::namespaced(ctx.client("cluster1").await?, &ns);
    let without_owner =
        |d: Option<&Deployment>| d.is_some_and(|d| !d.metadata.labels.as_ref().is_some_and(|l| l.contains_key(&owner)));
    let first = wait_until(
        wec.clone(),
        "web",
        "delivered without the owner label",
        DEADLINE,
        without_owner,
    )
    .await?;
    let uid = first.and_then(|d| d.metadata.uid).unwrap_or_default();

    // createOnly: a WDS update does not change the WEC object.
    apply(&wds_deployments, deployment(3, labels.clone())).await?;
    let binding_caught_up = |b: Option<&ks_shared::api::Binding>| {
        b.and_then(|b| b.status.as_ref())
            .is_some_and(|s| s.observed_generation == b.unwrap().metadata.generation.unwrap_or(0))
    };
    let bindings: Api<ks_shared::api::Binding> = Api::all(wds.clone());
    wait_until(
        bindings,
        &name,
        "processed by the transport",
        DEADLINE,
        binding_caught_up,
    )
    .await?;
    // The ManifestWork carries the update, and OCM's work agent has applied it there, so that any
    // update strategy but createOnly (another option naming the object first, say) would show.
    let works = Api::<ManifestWork>::namespaced(ctx.client("its1").await?, "cluster1");
    let applied = |w: Option<&ManifestWork>| {
        w.is_some_and(|w| {
            let updated = w
                .spec
                .workload
                .manifests
                .iter()
                .any(|m| m["spec"]["replicas"] == json!(3));
            updated && w.status.as_ref().is_some_and(|s| s.applied(w.metadata.generation))
        })
    };
    let work = format!("{name}.wds1.0");
    wait_until(works, &work, "applied by OCM with the update", DEADLINE, applied).await?;
    let after = wec.get("web").await?;
    anyhow::ensure!(
        after.metadata.uid.as_deref() == Some(uid.as_str()),
        "the WEC object was not re-created"
    );
    anyhow::ensure!(
        after.spec.and_then(|s| s.replicas) == Some(1),
        "createOnly: the WDS update did not reach the WEC"
    );

    // Editing the CustomTransform re-renders without touching the workload: now `owner` stays
    // and the other label goes; with createOnly the WEC keeps its object, so switch it off.
    send(&wds, &name, json!({"name": "cluster1"}), &selector).await?;
    apply(
        &transforms,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
        "metadata": {"name": transform}, "spec": {"apiGroup": "apps", "resource": "deployments",
        "remove": ["$.spec.template.metadata.labels[\"unused\"]"]}}),
    )
    .await?;
    let with_owner = |d: Option<&Deployment>| {
        d.is_some_and(|d| {
            d.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get(&owner).map(String::as_str) == Some("team-a"))
        })
    };
    wait_until(
        wec.clone(),
        "web",
        "carrying the owner label again",
        DEADLINE,
        with_owner,
    )
    .await?;
    wait_until(wec, "web", "scaled to 3", DEADLINE, replicas_are(3)).await?;

    policies.delete(&name, &DeleteParams::default()).await?;
    transforms.delete(&transform, &DeleteParams::default()).await?;
    ctx.delete_namespace("wds1", &ns).await
}

fn config_map(name: &str, labels: &Value, annotations: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels, "annotations": annotations}, "data": data})
}

/// The ManifestWorks of a Binding in one mailbox, by name, with their generations (which,
/// unlike resourceVersions, the work agent's status updates leave alone).
async fn works_of(ctx: &Ctx, binding: &str, mailbox: &str) -> anyhow::Result<BTreeMap<String, i64>> {
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, mailbox);
    let labelled = ListParams::default().labels(&format!("{}={binding}", names::ORIGIN_BINDING_LABEL));
    Ok(works
        .list(&labelled)
        .await?
        .items
        .into_iter()
        .map(|w| (w.name_any(), w.metadata.generation.unwrap_or_default()))
        .collect())
}

/// Waits until the Binding's status lists an error containing `what` (or none, for `None`).
async fn binding_errors(ctx: &Ctx, name: &str, what: Option<&str>) -> anyhow::Result<Vec<String>> {
    let bindings: Api<Binding> = Api::all(ctx.client("wds1").await?);
    let reported = move |b: Option<&Binding>| {
        let Some(binding) = b else { return false };
        let status = binding.status.clone().unwrap_or_default();
        status.observed_generation == binding.metadata.generation.unwrap_or(0)
            && match what {
                Some(what) => status.errors.iter().any(|e| e.contains(what)),
                None => status.errors.is_empty(),
            }
    };
    let binding = wait_until(bindings, name, "reporting its errors", DEADLINE, reported).await?;
    Ok(binding.and_then(|b| b.status).map(|s| s.errors).unwrap_or_default())
}

/// Waits until policy `name` shows `what` where users look (`kubectl get bp`, `describe`): in its
/// errors, and as the reason it is not Ready. Defect: what the transport could not deliver was
/// only in the Binding's status, while the policy said Ready, Available.
async fn policy_shows(policies: &Api<BindingPolicy>, name: &str, what: &str) -> anyhow::Result<()> {
    let shown = |p: Option<&BindingPolicy>| {
        let status = p.and_then(|p| p.status.as_ref());
        let ready = status.and_then(|s| s.condition("Ready"));
        status.is_some_and(|s| s.errors.iter().any(|e| e.contains(what)))
            && ready.is_some_and(|c| c.status == "False" && c.message.contains(what))
    };
    wait_until(policies.clone(), name, "showing the error", DEADLINE, shown).await?;
    Ok(())
}

/// Per-WEC templates: a property from the WEC's customization ConfigMap overrides its label,
/// changing the ConfigMap updates the WEC, and a template with a missing key is reported on the
/// Binding while the WECs keep what they had.
async fn templates_follow_wec_properties(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let its = ctx.client("its1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    // Properties of cluster1 only, under a key of this run (other runs may share the stack).
    let key = format!("zone{}", std::process::id());
    apply(
        &Api::<Namespace>::all(its.clone()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names::CUSTOMIZATION_PROPERTIES_NAMESPACE}}),
    )
    .await?;
    let properties: Api<ConfigMap> = Api::namespaced(its.clone(), names::CUSTOMIZATION_PROPERTIES_NAMESPACE);
    let set_region = |region: &'static str| {
        let properties = properties.clone();
        let key = key.clone();
        async move {
            properties
                .patch(
                    "cluster1",
                    &PatchParams::apply("ks-tests").force(),
                    &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cluster1"}, "data": {"region": region, key: "a"}})),
                )
                .await
        }
    };
    set_region("east-from-configmap").await?;
    let expand = json!({names::EXPAND_TEMPLATES_ANNOTATION: "true"});
    let wds_config_maps = Api::<ConfigMap>::namespaced(wds.clone(), &ns);
    let data = json!({"region": "{{.region}}", "cluster": "{{ .clusterName }}", "plain": "{x}"});
    apply(&wds_config_maps, config_map("site", &selector, expand.clone(), data)).await?;
    let name = format!("{ns}-templates");
    send(&wds, &name, json!({"location-group": "edge"}), &selector).await?;
    let shows = |region: &'static str, cluster: &'static str| {
        move |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref()).is_some_and(|d| {
                d.get("region").map(String::as_str) == Some(region)
                    && d.get("cluster").map(String::as_str) == Some(cluster)
                    && d.get("plain").map(String::as_str) == Some("{x}")
            })
        }
    };
    let on = |wec: &'static str| {
        let ctx = &ctx;
        let ns = ns.clone();
        async move { anyhow::Ok(Api::<ConfigMap>::namespaced(ctx.client(wec).await?, &ns)) }
    };
    wait_until(
        on("cluster1").await?,
        "site",
        "with the ConfigMap's region",
        DEADLINE,
        shows("east-from-configmap", "cluster1"),
    )
    .await?;
    wait_until(
        on("cluster2").await?,
        "site",
        "with its label's region",
        DEADLINE,
        shows("west", "cluster2"),
    )
    .await?;

    set_region("east-changed").await?;
    wait_until(
        on("cluster1").await?,
        "site",
        "following the ConfigMap",
        DEADLINE,
        shows("east-changed", "cluster1"),
    )
    .await?;

    // A key only cluster1 has: cluster2's expansion fails, and cluster2 keeps what it had (its
    // ManifestWork is not rewritten); cluster1, where it expands, follows.
    let before = works_of(&ctx, &name, "cluster2").await?;
    let data = json!({"region": "{{.region}}", "cluster": "{{ .clusterName }}", "plain": "{x}", "only": format!("{{{{.{key}}}}}")});
    apply(&wds_config_maps, config_map("site", &selector, expand.clone(), data)).await?;
    let errors = binding_errors(&ctx, &name, Some("map has no entry for key")).await?;
    anyhow::ensure!(
        errors
            .iter()
            .all(|e| e.starts_with(&format!("cluster2/ConfigMap({ns}/site).data.only: template: "))),
        "errors name the WEC, the object and the string: {errors:?}"
    );
    let with_only = |c: Option<&ConfigMap>| {
        c.and_then(|c| c.data.as_ref())
            .is_some_and(|d| d.get("only").map(String::as_str) == Some("a"))
    };
    wait_until(
        on("cluster1").await?,
        "site",
        "with the key only it has",
        DEADLINE,
        with_only,
    )
    .await?;
    let after = works_of(&ctx, &name, "cluster2").await?;
    anyhow::ensure!(
        before == after,
        "cluster2's ManifestWorks rewritten after its expansion error: {before:?} → {after:?}"
    );
    let unchanged = on("cluster2").await?.get("site").await?;
    anyhow::ensure!(
        !unchanged.data.unwrap_or_default().contains_key("only"),
        "cluster2 keeps the previous version"
    );

    Api::<BindingPolicy>::all(wds.clone())
        .delete(&name, &DeleteParams::default())
        .await?;
    properties.delete("cluster1", &DeleteParams::default()).await?;
    ctx.delete_namespace("wds1", &ns).await
}

/// ManifestWorks are cut at the size limit (the stack's hub runs with upstream's 512000 bytes)
/// and at the count limit (20 on the stack); an object alone over the size limit is an error on
/// the Binding; adding an object rewrites no full ManifestWork; and a Job with `generateName` is
/// accepted by the WEC after the transforms.
async fn sharding_and_generated_names(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let policies = Api::<BindingPolicy>::all(wds.clone());

    // By size: the Namespace and six ConfigMaps of 100 kB; five fill a ManifestWork.
    let by_size = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": by_size});
    label_namespace(&wds, &by_size, &selector).await?;
    let config_maps = Api::<ConfigMap>::namespaced(wds.clone(), &by_size);
    let big = "x".repeat(100_000);
    for i in 0..6 {
        apply(
            &config_maps,
            config_map(&format!("big-{i}"), &selector, json!({}), json!({"v": big})),
        )
        .await?;
    }
    let sized = format!("{by_size}-size");
    send(&wds, &sized, json!({"name": "cluster1"}), &selector).await?;
    let on_wec = Api::<ConfigMap>::namespaced(ctx.client("cluster1").await?, &by_size);
    wait_until(on_wec, "big-5", "delivered", DEADLINE, |c: Option<&ConfigMap>| {
        c.is_some()
    })
    .await?;
    let works = works_of(&ctx, &sized, "cluster1").await?;
    anyhow::ensure!(works.len() == 2, "by size: {works:?}");
    // An object alone over the size limit: an error on the Binding, and nothing else changes.
    let huge = "x".repeat(600_000);
    apply(
        &config_maps,
        config_map("huge", &selector, json!({}), json!({"v": huge})),
    )
    .await?;
    binding_errors(&ctx, &sized, Some("larger than")).await?;
    anyhow::ensure!(
        works_of(&ctx, &sized, "cluster1").await? == works,
        "rewritten after the error"
    );
    config_maps.delete("huge", &DeleteParams::default()).await?;
    binding_errors(&ctx, &sized, None).await?;

    // By count: the Namespace, 30 small ConfigMaps and a Job with a generated name: 20 + 12.
    let by_count = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": by_count});
    label_namespace(&wds, &by_count, &selector).await?;
    let config_maps = Api::<ConfigMap>::namespaced(wds.clone(), &by_count);
    for i in 0..30 {
        apply(
            &config_maps,
            config_map(&format!("small-{i:02}"), &selector, json!({}), json!({"v": "x"})),
        )
        .await?;
    }
    let jobs: Api<Job> = Api::namespaced(wds.clone(), &by_count);
    let job: Job = serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "job-", "labels": selector},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}))?;
    let job_name = jobs.create(&Default::default(), &job).await?.name_any();
    let counted = format!("{by_count}-count");
    send(&wds, &counted, json!({"name": "cluster1"}), &selector).await?;
    let on_wec = Api::<ConfigMap>::namespaced(ctx.client("cluster1").await?, &by_count);
    wait_until(
        on_wec.clone(),
        "small-29",
        "delivered",
        DEADLINE,
        |c: Option<&ConfigMap>| c.is_some(),
    )
    .await?;
    wait_until(
        Api::<Job>::namespaced(ctx.client("cluster1").await?, &by_count),
        &job_name,
        "accepted by the WEC",
        DEADLINE,
        |j: Option<&Job>| j.is_some(),
    )
    .await?;
    let works = works_of(&ctx, &counted, "cluster1").await?;
    anyhow::ensure!(works.len() == 2, "by count: {works:?}");
    // One more: the full ManifestWork stays as it is.
    apply(
        &config_maps,
        config_map("small-30", &selector, json!({}), json!({"v": "x"})),
    )
    .await?;
    wait_until(on_wec, "small-30", "delivered", DEADLINE, |c: Option<&ConfigMap>| {
        c.is_some()
    })
    .await?;
    let after = works_of(&ctx, &counted, "cluster1").await?;
    let rewritten = works
        .iter()
        .filter(|(w, generation)| after.get(*w) != Some(generation))
        .count();
    anyhow::ensure!(
        after.len() == 2 && rewritten == 1,
        "adding one object rewrote {rewritten}: {works:?} → {after:?}"
    );

    for (policy, ns) in [(sized, by_size), (counted, by_count)] {
        policies.delete(&policy, &DeleteParams::default()).await?;
        ctx.delete_namespace("wds1", &ns).await?;
    }
    Ok(())
}

/// A ManifestWork the ITS refuses (here: the Binding's name, over 63 characters, is not a valid
/// label value) is reported on the Binding; other Bindings go on.
async fn rejected_manifestwork_is_reported(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    let name = format!("{ns}-{}", "long".repeat(20));
    let policies = Api::<BindingPolicy>::all(wds.clone());
    send(&wds, &name, json!({"name": "cluster1"}), &selector).await?;
    let errors = binding_errors(&ctx, &name, Some("the ITS rejected ManifestWork cluster1/")).await?;
    anyhow::ensure!(
        errors.iter().all(|e| e.contains("must be no more than 63")),
        "{errors:?}"
    );
    policy_shows(&policies, &name, "the ITS rejected ManifestWork cluster1/").await?;
    policies.delete(&name, &DeleteParams::default()).await?;
    ctx.delete_namespace("wds1", &ns).await
}

/// A hostile template (a string doubled 30 times: 10 GB if it ran) is an error in its Binding's
/// status; the hub stays up (same process) and another policy's object is still delivered.
async fn a_template_bomb_is_an_error_not_an_outage(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let hub = ctx.stack.procs.running(&ks_tests::stack::Stack::hub_process("wds1"));
    let bomb = json!({"app.kubernetes.io/part-of": format!("{ns}-bomb")});
    let plain = json!({"app.kubernetes.io/part-of": format!("{ns}-plain")});
    // The namespace goes with the plain policy.
    label_namespace(&wds, &ns, &plain).await?;
    let mut text = String::from("{{$x := \"aaaaaaaaaa\"}}");
    for _ in 0..30 {
        text += "{{$x = printf \"%s%s\" $x $x}}";
    }
    text += "{{$x}}";
    let config_maps = Api::<ConfigMap>::namespaced(wds.clone(), &ns);
    let expand = json!({names::EXPAND_TEMPLATES_ANNOTATION: "true"});
    apply(&config_maps, config_map("bomb", &bomb, expand, json!({"big": text}))).await?;
    let name = format!("{ns}-bomb");
    send(&wds, &name, json!({"location-group": "edge"}), &bomb).await?;
    let errors = binding_errors(&ctx, &name, Some("longer than 1 MiB")).await?;
    anyhow::ensure!(
        errors
            .iter()
            .all(|e| e.contains(&format!("ConfigMap({ns}/bomb).data.big: template: "))),
        "the errors name the object and the string: {errors:?}"
    );
    policy_shows(&Api::all(wds.clone()), &name, "longer than 1 MiB").await?;

    apply(&config_maps, config_map("plain", &plain, json!({}), json!({"k": "v"}))).await?;
    send(&wds, &format!("{ns}-plain"), json!({"location-group": "edge"}), &plain).await?;
    for wec in ["cluster1", "cluster2"] {
        let delivered = Api::<ConfigMap>::namespaced(ctx.client(wec).await?, &ns);
        wait_until(
            delivered,
            "plain",
            "delivered beside the bomb",
            DEADLINE,
            |c: Option<&ConfigMap>| c.is_some(),
        )
        .await?;
    }
    anyhow::ensure!(
        ctx.stack.procs.running(&ks_tests::stack::Stack::hub_process("wds1")) == hub,
        "the hub kept running"
    );
    let policies = Api::<BindingPolicy>::all(wds.clone());
    for policy in [name, format!("{ns}-plain")] {
        policies.delete(&policy, &DeleteParams::default()).await?;
    }
    ctx.delete_namespace("wds1", &ns).await
}

/// A ConfigMap sent to cluster1 without its Namespace cannot be applied there: `kubectl describe`
/// of the WDS ConfigMap tells it, with OCM's reason, as a Warning Event.
async fn an_object_a_wec_cannot_apply_is_told_on_it(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "unapplied")?;
    let wds = ctx.client("wds1").await?;
    let ns = ctx.namespace("wds1").await?;
    let label = json!({"app.kubernetes.io/part-of": format!("{ns}-cm")});
    apply(
        &Api::<ConfigMap>::namespaced(wds.clone(), &ns),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "homeless", "labels": label}}),
    )
    .await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let policy = format!("{ns}-homeless");
    apply(
        &policies,
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": policy},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": label}]}]}}),
    )
    .await?;
    wait_for(
        "kubectl describe to tell the ConfigMap was not applied",
        DEADLINE,
        || async {
            let described = tools.kubectl("wds1", &["describe", "configmap", "homeless", "-n", &ns])?;
            Ok(described.lines().any(|l| {
                l.contains("Warning") && l.contains("DeliveryFailed") && l.contains("not applied on cluster1")
            }))
        },
    )
    .await?;
    policies.delete(&policy, &DeleteParams::default()).await?;
    Ok(())
}
