//! The fault suite: routine changes and crashes that must never delete or recreate a user's
//! object on a WEC, after each of which everything converges. Each test watches the WECs from
//! before the fault ([`WecLosses`]); the harness checks the stack's invariants at the end. The
//! tests restart or break the stack's processes, so they run one at a time.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::ocm::ManifestWork;
use ks_tests::faults::WecLosses;
use ks_tests::harness::{Ctx, run_one_at_a_time};
use ks_tests::stack::{HUB_MAX_NUM_WRAPPED, HubOptions, wait_for};
use ks_tests::stack_test;
use ks_tests::tools::{Tools, policy_yaml};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;

const DEADLINE: Duration = Duration::from_secs(120);
const PATH: &[&str] = &["hub-wds1", "ocm-agent-cluster1", "ocm-agent-cluster2"];
const WECS: [&str; 2] = ["cluster1", "cluster2"];

fn main() -> std::process::ExitCode {
    let ks_stack = std::path::Path::new(env!("CARGO_BIN_EXE_ks-stack"));
    run_one_at_a_time(
        ks_stack.parent().expect("binaries live in a directory"),
        vec![
            stack_test!(objects_moving_between_manifestworks_stay_on_the_wecs, PATH),
            stack_test!(a_crd_version_added_and_removed_keeps_the_wec_objects, PATH),
        ],
    )
}

/// A Namespace `id` and `count` objects in it made by `object(i)`, all labelled `fault: id`, and
/// a policy `id` sending them to both WECs: YAML for `kubectl apply -f`.
fn workload(id: &str, count: usize, object: impl Fn(usize) -> String) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {id}, labels: {{fault: \"{id}\"}}}}\n");
    for i in 0..count {
        yaml += "---\n";
        yaml += &object(i);
    }
    yaml + &policy_yaml(id, "location-group: edge", &format!("fault: \"{id}\""))
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
    wait_for(what, DEADLINE, || async {
        for wec in WECS {
            let works = works(ctx, wec, binding).await?;
            if works.len() != count || !works.iter().all(applied) || !check(&works) {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
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
    let yaml = workload(&id, OBJECTS, |i| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: {id}, labels: {{fault: \"{id}\"}}}}\n\
             data: {{i: \"{i}\"}}\n"
        )
    });
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
    tools.kubectl("wds1", &["delete", "-f", &file])?;
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
    tools.kubectl("wds1", &["apply", "-f", &crd_v1])?;
    let established = format!("crd/widgets.{group}");
    tools.kubectl(
        "wds1",
        &["wait", "--for=condition=established", "--timeout=60s", &established],
    )?;
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
    tools.kubectl("wds1", &["delete", "-f", &file])?;
    tools.kubectl("wds1", &["delete", "-f", &crd_v1])?;
    Ok(())
}
