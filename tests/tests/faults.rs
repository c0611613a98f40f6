//! The fault suite: routine changes and crashes that must never delete or recreate a user's
//! object on a WEC, after each of which everything converges. Each test watches the WECs from
//! before the fault ([`WecLosses`]); the harness checks the stack's invariants at the end. The
//! tests restart or break the stack's processes, so they run one at a time.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use ks_shared::api::WorkStatus;
use ks_shared::names::{AGENT_INSTALL_NAMESPACE, ORIGIN_BINDING_LABEL, STATUS_ADDON_HUB_SECRET};
use ks_shared::ocm::ManifestWork;
use ks_tests::faults::WecLosses;
use ks_tests::harness::{Ctx, run_one_at_a_time};
use ks_tests::measure::{Usage, rss_kib};
use ks_tests::stack::status_addon::sized_mailbox_quota;
use ks_tests::stack::{ADDON_PROCESS, HUB_MAX_NUM_WRAPPED, HubOptions, Stack, wait_for};
use ks_tests::stack_test;
use ks_tests::tools::{Tools, app_yaml, policy_yaml, singleton_policy_yaml};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;

const DEADLINE: Duration = Duration::from_secs(120);
const PATH: &[&str] = &["hub-wds1", "ocm-agent-cluster1", "ocm-agent-cluster2"];
const WECS: [&str; 2] = ["cluster1", "cluster2"];
const AGENT_PATH: &[&str] = &["hub-wds1", ADDON_PROCESS, "ocm-agent-cluster1", "kubelet-cluster1"];
const EVERYONE: &[&str] = &[
    "hub-wds1",
    ADDON_PROCESS,
    "ocm-agent-cluster1",
    "ocm-agent-cluster2",
    "apiserver-wds1",
    "apiserver-its1",
    "etcd",
];

ks_tests::stack_main!(
    run_one_at_a_time,
    vec![
        stack_test!(objects_moving_between_manifestworks_stay_on_the_wecs, PATH),
        stack_test!(a_policy_growing_one_apply_at_a_time_keeps_every_wec_object, PATH),
        stack_test!(a_crd_version_added_and_removed_keeps_the_wec_objects, PATH),
        stack_test!(a_rollout_survives_every_process_killed_or_stalled, EVERYONE),
        stack_test!(a_resource_whose_list_fails_holds_nothing_else_back, PATH),
        stack_test!(a_cache_that_stops_filling_is_said_and_costs_no_wec_object, PATH),
        stack_test!(a_busy_leader_keeps_its_lease_then_hands_over, PATH),
        stack_test!(the_agent_follows_its_reissued_hub_certificate, AGENT_PATH),
        stack_test!(a_policy_replaced_by_another_keeps_the_wec_objects, PATH),
        stack_test!(a_deeply_nested_object_is_an_error_not_an_outage, PATH),
        stack_test!(a_policys_templates_cannot_take_the_hub_down, PATH),
        stack_test!(a_collectors_expression_cannot_take_the_hub_down, PATH),
        stack_test!(a_wecs_forged_reports_cannot_take_the_hub_down, PATH),
        stack_test!(a_full_mailbox_holds_back_only_its_wecs_status, AGENT_PATH),
        stack_test!(the_hub_controllers_run_in_separate_processes, AGENT_PATH),
    ]
);

/// A Namespace `id` and `count` objects in it made by `object(i)`, all labelled `fault: id`, and
/// a policy `id` sending them to both WECs: YAML for `kubectl apply -f`. Its `kubectl delete -f`
/// needs `--ignore-not-found`: the Namespace, first in the file, is deleted first, and the WDS's
/// namespace controller may remove objects before kubectl gets to them.
fn workload(id: &str, count: usize, object: impl Fn(usize) -> String) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {id}, labels: {{fault: \"{id}\"}}}}\n");
    for i in 0..count {
        yaml += "---\n";
        yaml += &object(i);
    }
    yaml + &policy_yaml(id, "location-group: edge", &format!("fault: \"{id}\""))
}

/// The ConfigMap `cm-<i>` of test `id`, holding `value`: YAML.
fn config_map(id: &str, i: usize, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: {id}, labels: {{fault: \"{id}\"}}}}\n\
         data: {{value: \"{value}\"}}\n"
    )
}

/// The ManifestWorks of Binding `binding` in `wec`'s mailbox.
async fn works(ctx: &Ctx, wec: &str, binding: &str) -> anyhow::Result<Vec<ManifestWork>> {
    let api: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, wec);
    let selector = format!("{ORIGIN_BINDING_LABEL}={binding}");
    Ok(api.list(&ListParams::default().labels(&selector)).await?.items)
}

/// Whether the WEC's work agent has applied this generation of the ManifestWork.
fn applied(work: &ManifestWork) -> bool {
    let generation = work.metadata.generation.unwrap_or_default();
    work.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Applied" && c.status == "True" && c.observed_generation == Some(generation))
    })
}

/// Waits until every WEC's mailbox has `count` ManifestWorks of `binding`, each applied, and
/// together passing `check`.
async fn wait_works(
    ctx: &Ctx,
    binding: &str,
    count: usize,
    what: &str,
    check: impl Fn(&[ManifestWork]) -> bool,
) -> anyhow::Result<()> {
    // What was last seen, for the error: which ManifestWorks, and which were not applied.
    let seen = std::sync::Mutex::new(String::new());
    let waited = wait_for(what, DEADLINE, || async {
        let mut done = true;
        let mut state = String::new();
        for wec in WECS {
            let works = works(ctx, wec, binding).await?;
            // Each with its generation and the Applied condition it has, if any.
            let unapplied: Vec<String> = works
                .iter()
                .filter(|w| !applied(w))
                .map(|w| {
                    let condition = w
                        .status
                        .iter()
                        .flat_map(|s| &s.conditions)
                        .find(|c| c.type_ == "Applied");
                    format!(
                        "{} (generation {:?}, Applied: {condition:?})",
                        w.name_any(),
                        w.metadata.generation
                    )
                })
                .collect();
            let checked = check(&works);
            state += &format!(
                "{wec}: {} ManifestWorks, not applied: {unapplied:?}, check passed: {checked}; ",
                works.len()
            );
            done &= works.len() == count && unapplied.is_empty() && checked;
        }
        *seen.lock().unwrap() = state;
        Ok(done)
    })
    .await;
    waited.with_context(|| format!("last seen: {}", seen.lock().unwrap()))
}

/// Waits until each WEC has the `count` objects of `resource` that test `id` made, and watches
/// them from then on.
async fn delivered(ctx: &Ctx, resource: &ApiResource, id: &str, count: usize) -> anyhow::Result<WecLosses> {
    let what = format!("{count} {} in {id} on the WECs", resource.plural);
    let selector = format!("fault={id}");
    wait_for(&what, DEADLINE, || async {
        for wec in WECS {
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client(wec).await?, id, resource);
            match api.list(&ListParams::default().labels(&selector)).await {
                Ok(list) if list.items.len() == count => {}
                // The CRD may not have reached the WEC yet.
                Ok(_) | Err(kube::Error::Api(_)) => return Ok(false),
                Err(err) => return Err(err.into()),
            }
        }
        Ok(true)
    })
    .await?;
    WecLosses::watch(&ctx.stack, &WECS, resource, id, &selector).await
}

/// Fails with the objects lost, if any; checks each WEC still has `count` of them.
fn no_losses(losses: &WecLosses, count: usize) -> anyhow::Result<()> {
    let lost = losses.losses();
    ensure!(
        lost.is_empty(),
        "objects deleted or recreated on the WECs:\n{}",
        lost.join("\n")
    );
    for wec in WECS {
        ensure!(
            losses.count(wec) == count,
            "{wec} has {} objects, not {count}",
            losses.count(wec)
        );
    }
    Ok(())
}

/// Defect: when objects move between ManifestWorks (here: the hub restarted with another
/// `--max-num-wrapped`, then back), the old ManifestWork dropped them while the new one was
/// written, so OCM deleted them on every WEC and created them again. Objects are added where
/// they go, and removed where they were only once that is applied.
async fn objects_moving_between_manifestworks_stay_on_the_wecs(ctx: Ctx) -> anyhow::Result<()> {
    const OBJECTS: usize = 30;
    let tools = Tools::new(&ctx, "moves")?;
    let id = ctx.unique_name("moves");
    let yaml = workload(&id, OBJECTS, |i| config_map(&id, i, &i.to_string()));
    let file = tools.scratch_file("yaml", &yaml)?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let configmaps = ApiResource::erase::<ConfigMap>(&());
    // The Namespace is an object of the Binding too.
    let sharded = (OBJECTS + 1).div_ceil(HUB_MAX_NUM_WRAPPED);
    wait_works(&ctx, &id, sharded, "the workload sharded", |_| true).await?;
    let losses = delivered(&ctx, &configmaps, &id, OBJECTS).await?;

    let moves = async {
        for (limit, count) in [(1, OBJECTS + 1), (HUB_MAX_NUM_WRAPPED, sharded)] {
            let options = HubOptions {
                max_num_wrapped: Some(limit),
                ..HubOptions::STACK
            };
            ctx.stack.restart_hub("wds1", options).await?;
            wait_works(
                &ctx,
                &id,
                count,
                &format!("{count} ManifestWorks of at most {limit}"),
                |works| works.iter().all(|w| w.spec.workload.manifests.len() <= limit),
            )
            .await?;
        }
        anyhow::Ok(())
    }
    .await;
    if moves.is_err() {
        ctx.stack.restart_hub("wds1", HubOptions::STACK).await?;
    }
    moves?;
    no_losses(&losses, OBJECTS)?;
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    Ok(())
}

/// A policy's objects created one `kubectl apply` at a time, as a script does, grow it past one
/// ManifestWork and then past two. Under load the transport planned from a cache behind its own
/// writes, moved objects between ManifestWorks, and a ManifestWork written from that view could
/// drop objects the WECs then deleted and created again. Now each new object goes where there is
/// room, and those already delivered stay in their ManifestWork and on the WECs.
async fn a_policy_growing_one_apply_at_a_time_keeps_every_wec_object(ctx: Ctx) -> anyhow::Result<()> {
    const FIRST: usize = 5;
    const OBJECTS: usize = 2 * HUB_MAX_NUM_WRAPPED + 5;
    let tools = Tools::new(&ctx, "growth")?;
    let id = ctx.unique_name("growth");
    let file = tools.scratch_file("yaml", &workload(&id, FIRST, |i| config_map(&id, i, "")))?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let configmaps = ApiResource::erase::<ConfigMap>(&());
    let losses = delivered(&ctx, &configmaps, &id, FIRST).await?;
    for i in FIRST..OBJECTS {
        tools.kubectl_input("wds1", &["apply", "-f", "-"], &config_map(&id, i, ""))?;
    }
    // The Namespace is an object of the Binding too.
    let sharded = (OBJECTS + 1).div_ceil(HUB_MAX_NUM_WRAPPED);
    let first_shard = format!("{id}.wds1.0");
    let firsts: Vec<String> = (0..FIRST).map(|i| format!("cm-{i}")).collect();
    wait_works(&ctx, &id, sharded, "every object in one ManifestWork", |works| {
        let held: Vec<&str> = works
            .iter()
            .flat_map(|w| &w.spec.workload.manifests)
            .filter_map(|m| m["metadata"]["name"].as_str())
            .collect();
        let stayed = works.iter().any(|w| {
            let names: Vec<&str> = w
                .spec
                .workload
                .manifests
                .iter()
                .filter_map(|m| m["metadata"]["name"].as_str())
                .collect();
            w.name_any() == first_shard && firsts.iter().all(|f| names.contains(&f.as_str()))
        });
        held.len() == OBJECTS + 1 && stayed
    })
    .await?;
    no_losses(&losses, OBJECTS)?;
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    Ok(())
}

/// `kubectl apply -f file` of the CRD `name` in the WDS, and waits until it is established.
fn install_crd(tools: &Tools, file: &str, name: &str) -> anyhow::Result<()> {
    tools.kubectl("wds1", &["apply", "-f", file])?;
    let crd = format!("crd/{name}");
    tools.kubectl("wds1", &["wait", "--for=condition=established", "--timeout=60s", &crd])?;
    Ok(())
}

/// The CustomResourceDefinition `widgets.<group>`, labelled `fault: id`, serving `versions`
/// (the first is the storage version).
fn widget_crd(id: &str, group: &str, versions: &[&str]) -> String {
    let versions: String = versions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "  - {{name: {v}, served: true, storage: {}, schema: {{openAPIV3Schema: {{type: object, \
                 x-kubernetes-preserve-unknown-fields: true}}}}}}\n",
                i == 0
            )
        })
        .collect();
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
         metadata: {{name: widgets.{group}, labels: {{fault: \"{id}\"}}}}\n\
         spec:\n  group: {group}\n  scope: Namespaced\n\
         \x20 names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}\n\
         \x20 versions:\n{versions}"
    )
}

/// Defect: a version added to a CRD changes the version its objects are served at; the hub
/// replaced the informer of that resource with one at the new version whose cache was still
/// empty, dropped the objects from the Binding, and OCM deleted them on every WEC until the new
/// cache was filled. The old cache serves until the new one is filled, and a ManifestWork is
/// never shrunk from a cache that is not.
async fn a_crd_version_added_and_removed_keeps_the_wec_objects(ctx: Ctx) -> anyhow::Result<()> {
    const OBJECTS: usize = 20;
    let tools = Tools::new(&ctx, "crdversions")?;
    let id = ctx.unique_name("crdversions");
    let group = format!("{id}.faults.example.com");
    let crd = |versions: &[&str]| tools.scratch_file("yaml", &widget_crd(&id, &group, versions));
    let crd_v1 = crd(&["v1"])?;
    install_crd(&tools, &crd_v1, &format!("widgets.{group}"))?;
    let yaml = workload(&id, OBJECTS, |i| {
        format!(
            "apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w-{i}, namespace: {id}, labels: {{fault: \"{id}\"}}}}\n\
             spec: {{size: {i}}}\n"
        )
    });
    let file = tools.scratch_file("yaml", &yaml)?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let widgets = |version: &str| ApiResource {
        group: group.clone(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let losses = delivered(&ctx, &widgets("v1"), &id, OBJECTS).await?;

    // kube sorts v2 above v1: adding it makes it the version the objects are served at.
    let crd_v1_v2 = crd(&["v1", "v2"])?;
    for (file, version) in [(&crd_v1_v2, "v2"), (&crd_v1, "v1")] {
        tools.kubectl("wds1", &["apply", "-f", file])?;
        let api_version = format!("{group}/{version}");
        let what = format!("the Widgets delivered as {api_version}");
        // With the CRD and the Namespace.
        let sharded = (OBJECTS + 2).div_ceil(HUB_MAX_NUM_WRAPPED);
        wait_works(&ctx, &id, sharded, &what, |works| {
            let manifests = works.iter().flat_map(|w| &w.spec.workload.manifests);
            manifests
                .filter(|m| m["kind"] == "Widget" && m["apiVersion"] == api_version.as_str())
                .count()
                == OBJECTS
        })
        .await?;
    }
    no_losses(&losses, OBJECTS)?;
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    tools.kubectl("wds1", &["delete", "-f", &crd_v1])?;
    Ok(())
}

/// What the rollout suite does to a process.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `kill -9`, then the stack brings it back (the stand-in kubelet restarts agent pods).
    Kill,
    /// `SIGSTOP` for a while (a stalled or starved process), then `SIGCONT`.
    Stall,
}

/// The rollout of step `step`: 150 ConfigMaps carrying it and 3 Deployments with 1 or 2
/// replicas, to both WECs; a second policy asks for the Deployments' status from cluster1.
fn rollout_yaml(id: &str, step: usize) -> String {
    let replicas = 1 + step % 2;
    let yaml = workload(id, ROLLOUT_CONFIGMAPS + ROLLOUT_DEPLOYMENTS, |i| {
        if i < ROLLOUT_CONFIGMAPS {
            config_map(id, i, &step.to_string())
        } else {
            let name = format!("web-{}", i - ROLLOUT_CONFIGMAPS);
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {id}, labels: {{fault: \"{id}\"}}}}\n\
                 spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n\
                 \x20 template:\n    metadata: {{labels: {{app: {name}}}}}\n\
                 \x20   spec: {{containers: [{{name: web, image: \"nginx:1.27\"}}]}}\n"
            )
        }
    });
    yaml + &format!(
        "---\napiVersion: control.kubestellar.io/v1alpha1\nkind: BindingPolicy\nmetadata: {{name: {id}-status}}\n\
         spec:\n  clusterSelectors: [{{matchLabels: {{name: cluster1}}}}]\n\
         \x20 downsync: [{{objectSelectors: [{{matchLabels: {{fault: \"{id}\"}}}}], resources: [deployments], \
         wantSingletonReportedState: true}}]\n"
    )
}

const ROLLOUT_CONFIGMAPS: usize = 150;
const ROLLOUT_DEPLOYMENTS: usize = 3;

/// Whether step `step` of the rollout is on both WECs and cluster1's status is back in the WDS.
async fn rolled_out(ctx: &Ctx, id: &str, step: usize) -> anyhow::Result<bool> {
    let replicas = i32::try_from(1 + step % 2)?;
    let selector = ListParams::default().labels(&format!("fault={id}"));
    for wec in WECS {
        let client = ctx.client(wec).await?;
        let configmaps = Api::<ConfigMap>::namespaced(client.clone(), id).list(&selector).await?;
        let at_step = configmaps
            .iter()
            .filter(|c| c.data.as_ref().and_then(|d| d.get("value")) == Some(&step.to_string()))
            .count();
        let deployments = Api::<Deployment>::namespaced(client, id).list(&selector).await?;
        let scaled = deployments
            .iter()
            .filter(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas))
            .count();
        if at_step != ROLLOUT_CONFIGMAPS || scaled != ROLLOUT_DEPLOYMENTS {
            return Ok(false);
        }
    }
    let deployments = Api::<Deployment>::namespaced(ctx.client("wds1").await?, id)
        .list(&selector)
        .await?;
    Ok(deployments.items.len() == ROLLOUT_DEPLOYMENTS
        && deployments.iter().all(|d| {
            let status = d.status.as_ref();
            status.and_then(|s| s.available_replicas) == Some(replicas)
                && status.and_then(|s| s.replicas) == Some(replicas)
        }))
}

/// The fault-injection suite: a rollout of ~150 objects to both WECs, with status return, is
/// changed and at once a process of the stack is killed (`kill -9`) or stalled; after each, the
/// new step must reach every WEC with its status back in the WDS, and no WEC object may be
/// deleted or recreated on the way. Prints how long each took to converge.
async fn a_rollout_survives_every_process_killed_or_stalled(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "rollout")?;
    let id = ctx.unique_name("rollout");
    let apply = |step: usize| -> anyhow::Result<String> {
        let file = tools.scratch_file("yaml", &rollout_yaml(&id, step))?;
        // Server-side: kubectl's client-side apply spends ~15 s of CPU on 150 objects here. And
        // without kubectl's own schema check, which took 5 of its 7 to 8 s per apply (each of
        // the 11 steps): the objects are well formed, and faults are what this test is about.
        tools.kubectl("wds1", &["apply", "--server-side", "--validate=false", "-f", &file])?;
        Ok(file)
    };
    apply(0)?;
    wait_for("the first rollout", DEADLINE, || rolled_out(&ctx, &id, 0)).await?;
    let configmaps = delivered(&ctx, &ApiResource::erase::<ConfigMap>(&()), &id, ROLLOUT_CONFIGMAPS).await?;
    let deployments = delivered(&ctx, &ApiResource::erase::<Deployment>(&()), &id, ROLLOUT_DEPLOYMENTS).await?;

    let faults = [
        (Fault::Kill, Stack::hub_process("wds1")),
        (Fault::Kill, ADDON_PROCESS.to_string()),
        (Fault::Kill, Stack::agent_process("cluster1")),
        (Fault::Kill, Stack::agent_process("cluster2")),
        (Fault::Kill, "ocm-agent-cluster1".to_string()),
        (Fault::Kill, "apiserver-wds1".to_string()),
        (Fault::Kill, "apiserver-its1".to_string()),
        (Fault::Kill, "apiserver-cluster2".to_string()),
        (Fault::Kill, "etcd".to_string()),
        (Fault::Stall, Stack::hub_process("wds1")),
    ];
    let mut table = vec!["fault | converged in".to_string()];
    let mut file = String::new();
    for (step, (fault, process)) in faults.iter().enumerate() {
        let step = step + 1;
        file = apply(step)?;
        let started = std::time::Instant::now();
        match fault {
            Fault::Kill => {
                ctx.stack.procs.signal(process, "KILL")?;
                // A killed server's port is free once its clients have closed their connections.
                wait_for(&format!("{process} restarted"), DEADLINE, || async {
                    match ctx.stack.up().await {
                        Ok(()) => Ok(true),
                        Err(err) if format!("{err:#}").contains("is taken by another process") => Ok(false),
                        Err(err) => Err(err),
                    }
                })
                .await?;
            }
            Fault::Stall => {
                ctx.stack.procs.signal(process, "STOP")?;
                // The length of the stall, not a wait for something.
                tokio::time::sleep(STALL).await;
                ctx.stack.procs.signal(process, "CONT")?;
            }
        }
        let what = format!("step {step} rolled out after {fault:?} of {process}");
        wait_for(&what, DEADLINE, || rolled_out(&ctx, &id, step)).await?;
        let line = format!("{fault:?} {process} | {:.1} s", started.elapsed().as_secs_f64());
        eprintln!("{line}");
        table.push(line);
        let lost: Vec<String> = configmaps.losses().into_iter().chain(deployments.losses()).collect();
        ensure!(
            lost.is_empty(),
            "after {fault:?} of {process}, lost on the WECs:\n{}",
            lost.join("\n")
        );
    }
    println!("{}", table.join("\n"));
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    Ok(())
}

/// How long a stalled process stays stopped.
const STALL: Duration = Duration::from_secs(15);

/// Defect: the hub waited for every resource's cache before starting, so one resource whose
/// LIST always fails (here a CRD whose conversion webhook is down: its objects are stored at v1
/// and listed at v2) kept it unready, delivering nothing, forever. It starts after
/// `--cache-sync-timeout`, other kinds are delivered, and the failing one is counted.
async fn a_resource_whose_list_fails_holds_nothing_else_back(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "deadwebhook")?;
    let id = ctx.unique_name("deadwebhook");
    let group = format!("{id}.faults.example.com");
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: gadgets.{group}}}\n\
         spec:\n  group: {group}\n  scope: Namespaced\n\
         \x20 names: {{plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}}\n\
         \x20 conversion:\n    strategy: Webhook\n\
         \x20   webhook: {{conversionReviewVersions: [v1], clientConfig: {{url: \"https://127.0.0.1:9/convert\"}}}}\n\
         \x20 versions:\n\
         \x20 - {{name: v1, served: true, storage: true, schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}\n\
         \x20 - {{name: v2, served: true, storage: false, schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}\n"
    );
    let crd_file = tools.scratch_file("yaml", &crd)?;
    install_crd(&tools, &crd_file, &format!("gadgets.{group}"))?;
    // In a Namespace of its own: one holding an object that cannot be listed cannot be deleted.
    // A policy selects it.
    let gadgets = format!("{id}-gadgets");
    let gadget = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {gadgets}}}\n---\n\
         apiVersion: {group}/v1\nkind: Gadget\nmetadata: {{name: g, namespace: {gadgets}, labels: {{fault: {gadgets}}}}}\n\
         spec: {{size: 1}}\n"
    ) + &policy_yaml(&gadgets, "location-group: edge", &format!("fault: {gadgets}"));
    let gadget_file = tools.scratch_file("yaml", &gadget)?;
    tools.kubectl("wds1", &["apply", "-f", &gadget_file])?;

    // Ready within the shipped --cache-sync-timeout (30 s) and the usual start-up.
    let restarted = ctx.stack.restart_hub("wds1", HubOptions::STACK).await;
    let checked = async {
        restarted?;
        let yaml = workload(&id, 1, |_| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm, namespace: {id}, labels: {{fault: \"{id}\"}}}}\n")
        });
        let file = tools.scratch_file("yaml", &yaml)?;
        tools.kubectl("wds1", &["apply", "-f", &file])?;
        let losses = delivered(&ctx, &ApiResource::erase::<ConfigMap>(&()), &id, 1).await?;
        no_losses(&losses, 1)?;
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], ctx.stack.hub_port("wds1")));
        let (_, metrics) = ks_tests::process::http_get(address, "/metrics");
        let unsynced = ks_tests::metrics::sum(&metrics, "kubestellar_workload_unsynced_resources");
        let errors = metrics
            .lines()
            .filter(|l| l.starts_with("kubestellar_workload_watch_errors_total") && l.contains(&group))
            .count();
        ensure!(unsynced >= 1.0 && errors == 1, "the failing resource is not reported:\n{metrics}");
        // Stuck, it is said where users look: the policy that may select its objects, the
        // hub's readiness detail (ready still: the rest works on) and a metric.
        let watch = format!("workload:{group}/gadgets");
        let stuck = format!("kubestellar_watch_stuck{{watch=\"{watch}\"}} 1");
        ensure!(metrics.contains(&stuck), "no {stuck}:\n{metrics}");
        let (code, readiness) = ks_tests::process::http_get(address, "/readyz");
        ensure!(
            code == 200 && readiness.contains(&format!("watch {watch} stuck")),
            "/readyz: {code} {readiness}"
        );
        let policies: Api<ks_shared::api::BindingPolicy> = Api::all(ctx.client("wds1").await?);
        let said = format!("the WDS cache of {group}/gadgets cannot be filled");
        wait_for("the policy to say its cache is stuck", DEADLINE, || async {
            let status = policies.get_opt(&gadgets).await?.and_then(|p| p.status);
            Ok(status.is_some_and(|s| s.errors.iter().any(|e| e.contains(&said))))
        })
        .await?;
        // Namespaces finish deleting once the CRD whose objects cannot be listed is gone.
        tools.kubectl("wds1", &["delete", "--wait=false", "--ignore-not-found", "-f", &file])?;
        anyhow::Ok(())
    }
    .await;
    tools.kubectl("wds1", &["delete", "--wait=false", "-f", &gadget_file, "-f", &crd_file])?;
    checked
}

/// Widgets delivered to both WECs; then the WDS's CRD serves them at a version only a conversion
/// webhook that does not answer can give, and the hub restarts: its cache of them cannot be
/// filled. The Binding and the policy say so (only the hub's log did), and the WECs keep every
/// Widget: nothing is deleted for the sake of a cache.
async fn a_cache_that_stops_filling_is_said_and_costs_no_wec_object(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "stuckcache")?;
    let id = ctx.unique_name("stuckcache");
    let group = format!("{id}.faults.example.com");
    let crd_v1 = tools.scratch_file("yaml", &widget_crd(&id, &group, &["v1"]))?;
    install_crd(&tools, &crd_v1, &format!("widgets.{group}"))?;
    let yaml = workload(&id, 2, |i| {
        format!(
            "apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w-{i}, namespace: {id}, labels: {{fault: \"{id}\"}}}}\n\
             spec: {{size: {i}}}\n"
        )
    });
    let file = tools.scratch_file("yaml", &yaml)?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let widgets = ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let losses = delivered(&ctx, &widgets, &id, 2).await?;

    // kube sorts v2 above v1: the hub reads v2, which only the webhook can make.
    let dead_webhook = widget_crd(&id, &group, &["v1", "v2"]).replace(
        "  versions:\n",
        "  conversion:\n    strategy: Webhook\n    webhook: {conversionReviewVersions: [v1], \
         clientConfig: {url: \"https://127.0.0.1:9/convert\"}}\n  versions:\n",
    );
    let crd_dead = tools.scratch_file("yaml", &dead_webhook)?;
    tools.kubectl("wds1", &["apply", "-f", &crd_dead])?;
    let checked = async {
        ctx.stack.restart_hub("wds1", HubOptions::STACK).await?;
        let wds = ctx.client("wds1").await?;
        let bindings: Api<ks_shared::api::Binding> = Api::all(wds.clone());
        let policies: Api<ks_shared::api::BindingPolicy> = Api::all(wds);
        let on_binding = format!("the WDS cache of {group}/widgets is not filled");
        let on_policy = format!("the WDS cache of {group}/widgets cannot be filled");
        wait_for(
            "the Binding and the policy to say the cache is stuck",
            DEADLINE,
            || async {
                let says = |errors: Option<Vec<String>>, what: &str| {
                    errors.is_some_and(|e| e.iter().any(|e| e.contains(what) && e.contains("failures in a row")))
                };
                let binding = bindings.get_opt(&id).await?.and_then(|b| b.status).map(|s| s.errors);
                let policy = policies.get_opt(&id).await?.and_then(|p| p.status).map(|s| s.errors);
                Ok(says(binding, &on_binding) && says(policy, &on_policy))
            },
        )
        .await?;
        no_losses(&losses, 2)
    }
    .await;
    // Namespaces finish deleting once the CRD's objects can be listed again.
    tools.kubectl("wds1", &["apply", "-f", &crd_v1])?;
    tools.kubectl("wds1", &["delete", "--wait=false", "--ignore-not-found", "-f", &file])?;
    tools.kubectl("wds1", &["delete", "--wait=false", "-f", &crd_v1])?;
    checked
}

/// The flags of the two leader-electing hubs: a 3 s Lease, and client rate limits so tight that
/// the leader's own requests queue for seconds when it starts and under a burst.
fn electing_hub_flags(lease_namespace: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--leader-elect-lease-duration=3",
        "--wds-qps=10",
        "--wds-burst=10",
        "--its-qps=10",
        "--its-burst=10",
    ]
    .map(String::from)
    .into_iter()
    .chain([format!("--leader-elect-namespace={lease_namespace}")])
    .collect()
}

/// Whether a hub answers /readyz with 200 on `port` (a standby does not: it has not started).
fn ready(port: u16) -> bool {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect(address).is_ok() && ks_tests::process::http_get(address, "/readyz").0 == 200
}

/// Who holds the hub's Lease, and how often it changed hands.
async fn lease_holder(leases: &Api<Lease>) -> anyhow::Result<(String, i32)> {
    let spec = leases.get("ks-hub-wds1").await?.spec.unwrap_or_default();
    Ok((
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default(),
    ))
}

/// Defect: the Lease was renewed through the hub's rate-limited client, so a leader busy with its
/// own requests renewed late, a standby took over, and both wrote. Two hubs for wds1 with
/// leader election, a 3 s Lease and tight rate limits: the busy leader keeps its Lease through
/// its start and a burst (it renews on a client of its own), the standby stays unready; when the
/// leader is killed the standby takes over and delivers the next change. No WEC object is lost.
async fn a_busy_leader_keeps_its_lease_then_hands_over(ctx: Ctx) -> anyhow::Result<()> {
    const OBJECTS: usize = 40;
    let tools = Tools::new(&ctx, "leader")?;
    let id = ctx.unique_name("leader");
    let lease_namespace = ctx.namespace("wds1").await?;
    let leases: Api<Lease> = Api::namespaced(ctx.client("wds1").await?, &lease_namespace);
    let free_port = || -> anyhow::Result<u16> { Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
    let ports = [free_port()?, free_port()?];
    ctx.stack
        .procs
        .stop(&Stack::hub_process("wds1"), Duration::from_secs(10))?;
    let mut names = Vec::new();
    let replicas = async {
        for (replica, port) in ["a", "b"].into_iter().zip(ports) {
            names.push(
                ctx.stack
                    .start_hub_replica("wds1", replica, port, &electing_hub_flags(&lease_namespace))?,
            );
        }
        let started = std::time::Instant::now();
        wait_for("one of the two hubs to lead and be ready", DEADLINE, || async {
            // A hub that lost its Lease exits (to be restarted): here, a failure.
            for name in &names {
                ctx.stack.procs.check_alive(name)?;
            }
            Ok(ports.iter().any(|&port| ready(port)))
        })
        .await?;
        let leading = ports.iter().position(|&port| ready(port)).context("a hub is ready")?;
        let (holder, transitions) = lease_holder(&leases).await?;
        let pid = ctx.stack.procs.running(&names[leading]).context("the leader runs")?;
        ensure!(
            holder.ends_with(&format!("_{pid}")),
            "the ready hub (pid {pid}) holds the Lease, not {holder}"
        );
        ensure!(!ready(ports[1 - leading]), "the standby is not ready");

        let file = tools.scratch_file("yaml", &workload(&id, OBJECTS, |i| config_map(&id, i, "")))?;
        tools.kubectl("wds1", &["apply", "--server-side", "-f", &file])?;
        let losses = delivered(&ctx, &ApiResource::erase::<ConfigMap>(&()), &id, OBJECTS).await?;
        println!(
            "two hubs, 3 s Lease, 10 requests/s: leader started and delivered {OBJECTS} ConfigMaps in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        ensure!(
            lease_holder(&leases).await? == (holder.clone(), transitions),
            "the busy leader kept its Lease (holder {holder}, {transitions} transitions), now {:?}",
            lease_holder(&leases).await?
        );

        let killed = std::time::Instant::now();
        ctx.stack.procs.signal(&names[leading], "KILL")?;
        let standby = ports[1 - leading];
        wait_for("the standby to take over", DEADLINE, || async { Ok(ready(standby)) }).await?;
        let file = tools.scratch_file("yaml", &workload(&id, OBJECTS + 1, |i| config_map(&id, i, "")))?;
        tools.kubectl("wds1", &["apply", "--server-side", "-f", &file])?;
        let newest = format!("cm-{OBJECTS}");
        let taken_over = || async {
            for wec in WECS {
                let api: Api<ConfigMap> = Api::namespaced(ctx.client(wec).await?, &id);
                if api.get_opt(&newest).await?.is_none() {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        wait_for("the standby to deliver the next change", DEADLINE, taken_over).await?;
        println!(
            "leader killed: the standby led and delivered a new ConfigMap {:.1} s later",
            killed.elapsed().as_secs_f64()
        );
        let (new_holder, new_transitions) = lease_holder(&leases).await?;
        ensure!(
            new_holder != holder && new_transitions == transitions + 1,
            "the Lease changed hands once: {holder} ({transitions}) → {new_holder} ({new_transitions})"
        );
        no_losses(&losses, OBJECTS + 1)?;
        tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
        anyhow::Ok(())
    }
    .await;
    ctx.stack.procs.stop_all(&names, Duration::from_secs(10))?;
    ctx.stack.restart_hub("wds1", HubOptions::STACK).await?;
    replicas?;
    ctx.delete_namespace("wds1", &lease_namespace).await
}

/// The hub's controllers are peers over shared informers: wds1's hub replaced by one process
/// running only `binding` and another running `transport,status` (each with leader election,
/// each under its own Lease) delivers a Deployment to both WECs and returns cluster1's status.
async fn the_hub_controllers_run_in_separate_processes(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "apart")?;
    let id = ctx.unique_name("apart");
    let lease_namespace = ctx.namespace("wds1").await?;
    let free_port = || -> anyhow::Result<u16> { Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
    ctx.stack
        .procs
        .stop(&Stack::hub_process("wds1"), Duration::from_secs(10))?;
    let mut names = Vec::new();
    let apart = async {
        let mut ports = Vec::new();
        for controllers in ["binding", "transport,status"] {
            let port = free_port()?;
            let flags = [
                format!("--controllers={controllers}"),
                "--leader-elect".into(),
                format!("--leader-elect-namespace={lease_namespace}"),
            ];
            let replica = controllers.replace(',', "-");
            names.push(ctx.stack.start_hub_replica("wds1", &replica, port, &flags)?);
            ports.push(port);
        }
        wait_for("both hubs to be ready", DEADLINE, || async {
            for name in &names {
                ctx.stack.procs.check_alive(name)?;
            }
            Ok(ports.iter().all(|&port| ready(port)))
        })
        .await?;
        let leases: Api<Lease> = Api::namespaced(ctx.client("wds1").await?, &lease_namespace);
        for lease in ["ks-hub-wds1-binding", "ks-hub-wds1-status-transport"] {
            ensure!(leases.get_opt(lease).await?.is_some(), "no Lease {lease}");
        }

        let label = format!("apart: \"{id}\"");
        let yaml = app_yaml(&id, "web", &label)
            + &policy_yaml(&id, "location-group: edge", &label)
            + &singleton_policy_yaml(&id, "cluster1", &label);
        tools.kubectl_input("wds1", &["apply", "-f", "-"], &yaml)?;
        let deployments = ApiResource::erase::<Deployment>(&());
        wait_for("the Deployment on both WECs", DEADLINE, || async {
            for wec in WECS {
                let api: Api<Deployment> = Api::namespaced(ctx.client(wec).await?, &id);
                if api.get_opt("web").await?.is_none() {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await?;
        let wds: Api<DynamicObject> = Api::namespaced_with(ctx.client("wds1").await?, &id, &deployments);
        wait_for("cluster1's status in the WDS", DEADLINE, || async {
            let deployment = wds.get("web").await?;
            Ok(deployment.data["status"]["observedGeneration"] == 1)
        })
        .await?;
        tools.kubectl_input("wds1", &["delete", "--ignore-not-found", "-f", "-"], &yaml)?;
        anyhow::Ok(())
    }
    .await;
    ctx.stack.procs.stop_all(&names, Duration::from_secs(10))?;
    ctx.stack.restart_hub("wds1", HubOptions::STACK).await?;
    apart?;
    ctx.delete_namespace("wds1", &lease_namespace).await
}

/// The client certificate in the agent's hub kubeconfig Secret on `wec`.
async fn hub_certificate(secrets: &Api<Secret>) -> anyhow::Result<Option<Vec<u8>>> {
    let secret = secrets.get(STATUS_ADDON_HUB_SECRET).await?;
    Ok(secret.data.and_then(|d| d.get("tls.crt").map(|c| c.0.clone())))
}

/// Defect: the agent read its hub kubeconfig once, so when OCM gave the add-on a new client
/// certificate it kept the old one until that expired. Here OCM issues a new one (the test
/// makes the Secret's extra data stale, which OCM answers at once with a new CSR, approved by our
/// add-on and signed by its1's controller-manager: the path of a rotation, which OCM itself only
/// checks for every 5 min); the stand-in kubelet updates the mounted files in place, as a kubelet
/// does; the agent sees them change, stops, is restarted with them, and status flows again.
async fn the_agent_follows_its_reissued_hub_certificate(ctx: Ctx) -> anyhow::Result<()> {
    let wec = "cluster1";
    let old_agent = ctx.stack.wait_agent_ready(wec, DEADLINE).await?;
    let secrets: Api<Secret> = Api::namespaced(ctx.client(wec).await?, AGENT_INSTALL_NAMESPACE);
    let old_certificate = hub_certificate(&secrets)
        .await?
        .context("the agent has a hub certificate")?;
    let started = std::time::Instant::now();
    let stale = serde_json::json!({"stringData": {"cluster-name": format!("not-{wec}")}});
    secrets
        .patch(STATUS_ADDON_HUB_SECRET, &PatchParams::default(), &Patch::Merge(&stale))
        .await?;
    wait_for("OCM to issue a new certificate", DEADLINE, || async {
        Ok(hub_certificate(&secrets).await?.is_some_and(|c| c != old_certificate))
    })
    .await?;
    let issued = started.elapsed();
    let agent = Stack::agent_process(wec);
    wait_for("the agent to stop for its new credentials", DEADLINE, || async {
        Ok(ctx.stack.procs.running(&agent) != Some(old_agent))
    })
    .await?;
    let new_agent = ctx.stack.wait_agent_ready(wec, DEADLINE).await?;
    ensure!(new_agent != old_agent, "a new agent process runs");
    let restarted = started.elapsed();

    // Status flows through the new agent: a Deployment's status comes back to the WDS.
    let tools = Tools::new(&ctx, "rotation")?;
    let id = ctx.unique_name("rotation");
    let yaml = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {id}, labels: {{fault: \"{id}\"}}}}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {id}, labels: {{fault: \"{id}\"}}}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n\
         \x20 template:\n    metadata: {{labels: {{app: web}}}}\n\
         \x20   spec: {{containers: [{{name: web, image: \"nginx:1.27\"}}]}}\n\
         ---\napiVersion: control.kubestellar.io/v1alpha1\nkind: BindingPolicy\nmetadata: {{name: {id}}}\n\
         spec:\n  clusterSelectors: [{{matchLabels: {{name: {wec}}}}}]\n\
         \x20 downsync: [{{objectSelectors: [{{matchLabels: {{fault: \"{id}\"}}}}], wantSingletonReportedState: true}}]\n"
    );
    let file = tools.scratch_file("yaml", &yaml)?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let deployments: Api<Deployment> = Api::namespaced(ctx.client("wds1").await?, &id);
    wait_for("the Deployment's status back in the WDS", DEADLINE, || async {
        let web = deployments.get_opt("web").await?;
        Ok(web.and_then(|d| d.status).and_then(|s| s.available_replicas) == Some(1))
    })
    .await?;
    println!(
        "hub certificate re-issued in {:.1} s; agent restarted with it after {:.1} s; status returned after {:.1} s",
        issued.as_secs_f64(),
        restarted.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    Ok(())
}

/// A user replaces one policy by another selecting the same objects (applies the new one and
/// deletes the old) while the WECs' work agents are slow (here: stopped until the hub has written
/// the new ManifestWorks): the objects move from one Binding's ManifestWorks to the other's and
/// must stay on the WECs throughout, so the old ones wait until the new ones are applied.
async fn a_policy_replaced_by_another_keeps_the_wec_objects(ctx: Ctx) -> anyhow::Result<()> {
    const OBJECTS: usize = 10;
    let tools = Tools::new(&ctx, "replaced")?;
    let id = ctx.unique_name("replaced");
    let file = tools.scratch_file("yaml", &workload(&id, OBJECTS, |i| config_map(&id, i, "")))?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let losses = delivered(&ctx, &ApiResource::erase::<ConfigMap>(&()), &id, OBJECTS).await?;

    let successor = format!("{id}-v2");
    let policy = tools.scratch_file(
        "yaml",
        &policy_yaml(&successor, "location-group: edge", &format!("fault: \"{id}\"")),
    )?;
    let agents = WECS.map(|wec| format!("ocm-agent-{wec}"));
    for agent in &agents {
        ctx.stack.procs.signal(agent, "STOP")?;
    }
    let replaced = async {
        tools.kubectl("wds1", &["apply", "-f", &policy])?;
        tools.kubectl("wds1", &["delete", "bindingpolicy", &id])?;
        wait_for("the new policy's ManifestWorks written", DEADLINE, || async {
            for wec in WECS {
                if works(&ctx, wec, &successor).await?.is_empty() {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
    }
    .await;
    for agent in &agents {
        ctx.stack.procs.signal(agent, "CONT")?;
    }
    replaced?;
    wait_works(&ctx, &successor, 1, "the new policy's ManifestWork applied", |_| true).await?;
    wait_works(&ctx, &id, 0, "the old policy's ManifestWorks gone", |_| true).await?;
    no_losses(&losses, OBJECTS)?;

    tools.kubectl("wds1", &["delete", "-f", &policy])?;
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    Ok(())
}

/// Hostile input: objects nested more than 120 levels are not delivered. Wrapped in a ManifestWork
/// (5 levels more in a watch event), one near serde_json's 128-level limit would break the
/// transport's watch of every ManifestWork. One of 121 levels is an error in its Binding's status,
/// and another policy's object is still delivered. (From about 124 levels the hub's own watch of
/// that resource cannot decode it: a watch error, counted per resource.)
async fn a_deeply_nested_object_is_an_error_not_an_outage(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "deep")?;
    let id = ctx.unique_name("deep");
    let group = format!("{id}.faults.example.com");
    let crd = tools.scratch_file("yaml", &widget_crd(&id, &group, &["v1"]))?;
    install_crd(&tools, &crd, &format!("widgets.{group}"))?;
    let nested = (0..120).fold(serde_json::json!("leaf"), |inner, _| serde_json::json!({"a": inner}));
    let widget = serde_json::json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "deep", "namespace": id, "labels": {"fault": id}}, "spec": nested});
    let yaml = workload(&id, 1, |i| config_map(&id, i, "")) + "---\n" + &serde_json::to_string(&widget)? + "\n";
    let file = tools.scratch_file("yaml", &yaml)?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    let bindings: Api<ks_shared::api::Binding> = Api::all(ctx.client("wds1").await?);
    wait_for("the Binding to report the nesting", DEADLINE, || async {
        let errors = bindings
            .get_opt(&id)
            .await?
            .and_then(|b| b.status)
            .map(|s| s.errors)
            .unwrap_or_default();
        Ok(errors
            .iter()
            .any(|e| e.contains(&format!("Widget.{group}({id}/deep): nested 121 levels deep"))))
    })
    .await?;

    another_policy_delivers(&ctx, &tools, &id, &file).await?;
    tools.kubectl("wds1", &["delete", "-f", &crd])?;
    Ok(())
}

/// Another policy delivers: test `id`'s other workload, one ConfigMap, reaches both WECs. Then
/// that workload and the one of `file` are deleted.
async fn another_policy_delivers(ctx: &Ctx, tools: &Tools, id: &str, file: &str) -> anyhow::Result<()> {
    let other = format!("{id}-other");
    let other_file = tools.scratch_file("yaml", &workload(&other, 1, |i| config_map(&other, i, "")))?;
    tools.kubectl("wds1", &["apply", "-f", &other_file])?;
    delivered(ctx, &ApiResource::erase::<ConfigMap>(&()), &other, 1).await?;
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &other_file])?;
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", file])?;
    Ok(())
}

/// Runs `hostile` while following hub-wds1's resident memory, then prints it before and at its
/// peak `during` what `hostile` did.
async fn watching_hub_memory<T>(
    ctx: &Ctx,
    during: &str,
    hostile: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let hub = ctx
        .stack
        .procs
        .running(&Stack::hub_process("wds1"))
        .context("hub-wds1 is not running")?;
    let before = rss_kib(hub) as f64 / 1024.0;
    let usage = Usage::start(vec![hub]);
    let outcome = hostile.await;
    let (peak, _) = usage.read();
    eprintln!("hub-wds1 resident memory: {before:.0} MiB before, at most {peak:.0} MiB {during}");
    outcome
}

/// A policy whose templates are small and legal but print about 80 MB for its two WECs (each
/// ConfigMap 400 kB from 1.5 kB, under what one ManifestWork may hold): the hub expands them only
/// up to its growth bounds and says so on the Binding, and another policy delivers meanwhile. The
/// hub's resident memory, before and at its peak, is printed.
async fn a_policys_templates_cannot_take_the_hub_down(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "growth")?;
    let id = ctx.unique_name("growth");
    let printed = r#"{{printf \"%10000s\" .clusterName}}"#.repeat(40);
    let templated = |i: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: {id}, labels: {{fault: \"{id}\"}}, \
             annotations: {{control.kubestellar.io/expand-templates: \"true\"}}}}\ndata: {{value: \"{printed}\"}}\n"
        )
    };
    let file = tools.scratch_file("yaml", &workload(&id, 100, templated))?;
    let bindings: Api<ks_shared::api::Binding> = Api::all(ctx.client("wds1").await?);
    let applied_and_reported = async {
        tools.kubectl("wds1", &["apply", "-f", &file])?;
        wait_for("the Binding to report its templates' growth", DEADLINE, || async {
            let status = bindings.get_opt(&id).await?.and_then(|b| b.status);
            let errors = status.map(|s| s.errors).unwrap_or_default();
            Ok(errors
                .iter()
                .any(|e| e.contains("not expanded: the Binding's templates add more than 4 MiB for this WEC")))
        })
        .await
    };
    watching_hub_memory(&ctx, "while the templates expanded", applied_and_reported).await?;
    another_policy_delivers(&ctx, &tools, &id, &file).await
}

/// Defect: the cost estimate of a StatusCollector's CEL counted comprehension ranges only from
/// the object and the reports, never literal lists, and never the bytes built. Two nested `map`s
/// over literal lists of 150, each cell a 20 kB annotation plus a character, took the hub from
/// about 55 MiB to 1,129 MiB, past its chart's 1 GiB limit. The evaluation is now refused before
/// it runs, the error is on the StatusCollector, and other policies keep delivering.
async fn a_collectors_expression_cannot_take_the_hub_down(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "cel")?;
    let id = ctx.unique_name("cel");
    let list = format!("[{}]", vec!["1"; 150].join(","));
    let cells = format!("{list}.map(a, {list}.map(b, obj.metadata.annotations.big + 'x')).size()");
    let big = "a".repeat(20_000);
    let object = |i: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: {id}, labels: {{fault: \"{id}\"}}, \
             annotations: {{big: \"{big}\"}}}}\n"
        )
    };
    let collector = format!(
        "---\napiVersion: control.kubestellar.io/v1alpha1\nkind: StatusCollector\nmetadata: {{name: {id}}}\n\
         spec: {{limit: 10, select: [{{name: cells, def: \"{cells}\"}}]}}\n"
    );
    let policy = format!(
        "---\napiVersion: control.kubestellar.io/v1alpha1\nkind: BindingPolicy\nmetadata: {{name: {id}}}\n\
         spec:\n  clusterSelectors: [{{matchLabels: {{location-group: edge}}}}]\n\
         \x20 downsync: [{{objectSelectors: [{{matchLabels: {{fault: \"{id}\"}}}}], statusCollectors: [{id}]}}]\n"
    );
    let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {id}, labels: {{fault: \"{id}\"}}}}\n");
    let file = tools.scratch_file("yaml", &format!("{namespace}---\n{}{collector}{policy}", object(0)))?;
    let collectors: Api<ks_shared::api::StatusCollector> = Api::all(ctx.client("wds1").await?);
    let applied_and_reported = async {
        tools.kubectl("wds1", &["apply", "-f", &file])?;
        wait_for(
            "the StatusCollector to report the refused evaluation",
            DEADLINE,
            || async {
                let status = collectors.get_opt(&id).await?.and_then(|c| c.status);
                let errors = status.map(|s| s.errors).unwrap_or_default();
                Ok(errors.iter().any(|e| {
                    e.contains("evaluation could build up to")
                        && e.ends_with("more than the 67108864 left of the 67108864 one object's evaluations may build")
                }))
            },
        )
        .await
    };
    watching_hub_memory(&ctx, "while the collector ran", applied_and_reported).await?;
    another_policy_delivers(&ctx, &tools, &id, &file).await
}

/// Defect: the hub cached every WorkStatus labelled with its WDS whole, and a WEC's agent
/// credential may write any WorkStatus in its mailbox, as many as it likes: 100 forged reports
/// of 1 MB each grew the hub by as much, and 2,000 would fill the ITS's etcd. Now the mailbox's
/// quota, sized by the add-on from what is delivered there, refuses forged reports beyond it; a
/// status larger than the hub keeps is refused (counted in
/// `kubestellar_status_refused_reports_total` and said in the hub's log); a report on an object
/// not sent to its WEC is cached without what it reports (counted in
/// `kubestellar_status_withheld_reports_total`); other policies keep delivering.
async fn a_wecs_forged_reports_cannot_take_the_hub_down(ctx: Ctx) -> anyhow::Result<()> {
    let tools = Tools::new(&ctx, "forged")?;
    let id = ctx.unique_name("forged");
    let its = ctx.client("its1").await?;
    let mailbox: Api<WorkStatus> = Api::namespaced(its.clone(), "cluster1");
    // 40 objects delivered: the quota grows to at least 2 × 40 + 64 (what the add-on's
    // README says), whatever else the mailbox holds.
    let file = tools.scratch_file("yaml", &workload(&id, 40, |i| config_map(&id, i, "")))?;
    tools.kubectl("wds1", &["apply", "-f", &file])?;
    delivered(&ctx, &ApiResource::erase::<ConfigMap>(&()), &id, 40).await?;
    let (hard, _) = sized_mailbox_quota(&its, "cluster1", DEADLINE).await?;
    ensure!(
        hard >= 2 * 40 + 64,
        "cluster1's quota of {hard} did not grow with 40 objects delivered"
    );
    let hard = hard as usize;
    let hub = std::net::SocketAddr::from(([127, 0, 0, 1], ctx.stack.hub_port("wds1")));
    let counted = |name: &'static str| {
        move || {
            let (_, text) = ks_tests::process::http_get(hub, "/metrics");
            ks_tests::metrics::sum(&text, name)
        }
    };
    let (refused, withheld) = (
        counted("kubestellar_status_refused_reports_total"),
        counted("kubestellar_status_withheld_reports_total"),
    );
    let (refused_before, withheld_before) = (refused(), withheld());
    let blob = "x".repeat(300_000);
    let forge = async {
        let mut forged = 0;
        loop {
            ensure!(
                forged <= hard,
                "{forged} forged WorkStatuses got past a quota of {hard}"
            );
            let name = format!("{id}-{forged}");
            let report = serde_json::json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
                "metadata": {"name": name, "labels": {"transport.kubestellar.io/originWdsName": "wds1"}},
                "spec": {"sourceRef": {"group": "", "version": "v1", "resource": "configmaps", "kind": "ConfigMap",
                                       "name": name, "namespace": id}}});
            let apply = PatchParams::apply("ks-tests").force();
            match mailbox.patch(&name, &apply, &Patch::Apply(&report)).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("exceeded quota") => break,
                Err(err) => return Err(err.into()),
            }
            let status = serde_json::json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
                "status": {"blob": blob}});
            mailbox.patch_status(&name, &apply, &Patch::Apply(&status)).await?;
            forged += 1;
        }
        // Each too large, and each on an object not sent to cluster1.
        wait_for(
            "the hub to refuse and withhold the forged reports",
            DEADLINE,
            || async {
                Ok(refused() - refused_before >= forged as f64 && withheld() - withheld_before >= forged as f64)
            },
        )
        .await?;
        Ok(forged)
    };
    let outcome = watching_hub_memory(&ctx, "while the forged reports came", forge).await;
    let delete = ListParams::default().labels("transport.kubestellar.io/originWdsName=wds1");
    for report in mailbox.list(&delete).await?.items {
        if report.name_any().starts_with(&id) {
            mailbox.delete(&report.name_any(), &Default::default()).await?;
        }
    }
    let forged = outcome?;
    eprintln!("{forged} forged reports of 300 kB before cluster1's quota of {hard} WorkStatuses refused the next");
    another_policy_delivers(&ctx, &tools, &id, &file).await
}

/// One WEC cannot fill the ITS: the add-on's quota in its mailbox refuses WorkStatuses beyond the
/// limit. With cluster1's mailbox full, a new object still reaches both WECs and cluster2's status
/// still comes; cluster1's agent says in its log why it has none and keeps trying, and once the
/// mailbox has room its status comes too.
async fn a_full_mailbox_holds_back_only_its_wecs_status(ctx: Ctx) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ResourceQuota;
    use ks_shared::api::WorkStatus;
    const COUNTED: &str = "count/workstatuses.control.kubestellar.io";
    let its = ctx.client("its1").await?;
    // The add-on's quota (addon/src/hub_rbac.rs MAILBOX_QUOTA).
    let quotas: Api<ResourceQuota> = Api::namespaced(its.clone(), "cluster1");
    // Sized from what is delivered now (a test before may have taken objects away), and left so
    // by the one object this test adds: the add-on rewrites the limit only when the deliveries
    // cross a power of two, and would otherwise put room back while the test wants none.
    let (sized, objects) = sized_mailbox_quota(&its, "cluster1", DEADLINE).await?;
    ensure!(
        2 * (objects + 1) + 64 <= sized,
        "one more object would resize cluster1's quota of {sized}"
    );
    let quota = quotas.get("addon-status-workstatuses").await?;
    let hard = |q: &ResourceQuota| {
        q.spec
            .as_ref()
            .and_then(|s| s.hard.as_ref())
            .and_then(|h| h.get(COUNTED))
            .cloned()
    };
    let limit = hard(&quota).context("the quota counts WorkStatuses")?;
    // Full: no room at all. (Setting it to what the quota counts now would leave room as soon
    // as the quota controller counts WorkStatuses deleted meanwhile.)
    let full = k8s_openapi::apimachinery::pkg::api::resource::Quantity("0".to_string());
    let set_hard = |value: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        let patch = serde_json::json!({"spec": {"hard": {COUNTED: value}}});
        let quotas = quotas.clone();
        async move {
            quotas
                .patch(
                    "addon-status-workstatuses",
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
        }
    };
    let tools = Tools::new(&ctx, "quota")?;
    let id = ctx.unique_name("quota");
    let file = tools.scratch_file("yaml", &workload(&id, 1, |i| config_map(&id, i, "")))?;
    let reported = |wec: &'static str| {
        let api: Api<WorkStatus> = Api::namespaced(its.clone(), wec);
        let id = id.clone();
        move || {
            let api = api.clone();
            let id = id.clone();
            async move {
                let all = api.list(&ListParams::default()).await?;
                Ok(all
                    .iter()
                    .any(|w| w.spec.spec.source_ref.namespace == id && w.spec.spec.source_ref.name == "cm-0"))
            }
        }
    };
    set_hard(&full).await?;
    let while_full = async {
        tools.kubectl("wds1", &["apply", "-f", &file])?;
        delivered(&ctx, &ApiResource::erase::<ConfigMap>(&()), &id, 1).await?;
        wait_for("cluster2's WorkStatus", DEADLINE, reported("cluster2")).await?;
        let agent_log = ctx.stack.procs.log_file(&ks_tests::stack::kubelet::pod_process(
            "cluster1",
            AGENT_INSTALL_NAMESPACE,
            "status-agent",
        ));
        wait_for("cluster1's agent to log the refusal", DEADLINE, || async {
            Ok(std::fs::read_to_string(&agent_log)?.contains("exceeded quota: addon-status-workstatuses"))
        })
        .await?;
        ensure!(!reported("cluster1")().await?, "a WorkStatus got past the full quota");
        anyhow::Ok(())
    };
    let while_full = while_full.await;
    // Room again, whatever happened: the tests after this one need cluster1's status.
    set_hard(&limit).await?;
    while_full?;
    wait_for(
        "cluster1's WorkStatus once there is room",
        DEADLINE,
        reported("cluster1"),
    )
    .await?;
    tools.kubectl("wds1", &["delete", "--ignore-not-found", "-f", &file])?;
    Ok(())
}
