//! An object two policies send to one WEC is held there by two ManifestWorks, which OCM's agent
//! applies as one field manager: the copy is whatever it applied last. A ManifestWork that goes
//! (its policy deleted, or no longer selecting the object) may have been applied last with
//! content the WDS has since changed, since nothing rewrites a ManifestWork on its way out; the
//! one that stays must then be applied again, not left until OCM's resync minutes later. The
//! generated convergence test found it: a label the WDS had removed stayed on cluster2.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use ks_shared::api::BindingPolicy;
use ks_tests::harness::{Ctx, StackTest, apply, wait_until};
use ks_tests::stack_test;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);
const COMPONENTS: &[&str] = &["hub-wds1", "apiserver-wds1", "ocm-agent-cluster1"];

pub fn tests() -> Vec<StackTest> {
    vec![stack_test!(a_wec_copy_follows_the_sender_that_stays, COMPONENTS)]
}

/// The policy `name` sending what `selector` selects to cluster1.
fn policy(name: &str, selector: &Value) -> Value {
    json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
           "metadata": {"name": name},
           "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                    "downsync": [{"objectSelectors": [{"matchLabels": selector}]}]}})
}

/// How many ManifestWorks hold a WEC copy: OCM's agent gives it an owner per AppliedManifestWork.
fn holders(copy: &ConfigMap) -> usize {
    copy.meta()
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.kind == "AppliedManifestWork")
        .count()
}

/// Two policies send a ConfigMap to cluster1. What OCM's agent does when it applies the going
/// ManifestWork's older content after the staying one's is done here by hand (the same field
/// manager, forced); then that policy is deleted. cluster1's copy must come back to what the WDS
/// says, long before OCM's own resync (every 4 to 6 minutes).
async fn a_wec_copy_follows_the_sender_that_stays(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let (ns, selector) = ctx.selected_namespace("wds1").await?;
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let (going, staying) = (ns.clone(), format!("{ns}-b"));
    let config_map = |value: &str, extra: Value| {
        let mut labels = selector.clone();
        if let (Some(labels), Value::Object(extra)) = (labels.as_object_mut(), extra) {
            labels.extend(extra);
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "namespace": ns, "labels": labels},
               "data": {"k": value}})
    };
    apply(
        &Api::<ConfigMap>::namespaced(wds.clone(), &ns),
        config_map("v", json!({})),
    )
    .await?;
    apply(&policies, policy(&going, &selector)).await?;
    apply(&policies, policy(&staying, &selector)).await?;
    let on_wec: Api<ConfigMap> = Api::namespaced(ctx.client("cluster1").await?, &ns);
    let held_twice = |c: Option<&ConfigMap>| c.is_some_and(|c| holders(c) == 2);
    wait_until(on_wec.clone(), "cm", "held by both ManifestWorks", DEADLINE, held_twice).await?;

    let stale = config_map("stale", json!({"stale": "yes"}));
    on_wec
        .patch("cm", &PatchParams::apply("work-agent").force(), &Patch::Apply(&stale))
        .await?;
    policies.delete(&going, &DeleteParams::default()).await?;
    let as_the_wds_says = |c: Option<&ConfigMap>| {
        c.is_some_and(|c| {
            let data = c.data.as_ref().and_then(|d| d.get("k")).map(String::as_str);
            let stale_label = c.meta().labels.as_ref().is_some_and(|l| l.contains_key("stale"));
            holders(c) == 1 && data == Some("v") && !stale_label
        })
    };
    wait_until(
        on_wec,
        "cm",
        "as the WDS says, held by the staying ManifestWork",
        DEADLINE,
        as_the_wds_says,
    )
    .await?;
    policies.delete(&staying, &DeleteParams::default()).await?;
    Ok(())
}
