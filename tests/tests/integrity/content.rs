//! What a WEC is sent: never an object emptied because it could not be read, and never nothing
//! at all for a whole policy because one of its objects is in error. An object in error keeps
//! its last good content on the WECs (its error is on the Binding and the policy); every other
//! object of the policy, and of its resource, goes on flowing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ks_shared::api::{Binding, BindingPolicy};
use ks_shared::names::EXPAND_TEMPLATES_ANNOTATION;
use ks_tests::harness::{Ctx, StackTest, apply, wait_until};
use ks_tests::stack_test;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::wait::conditions;
use kube::{Client, Resource};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);
const COMPONENTS: &[&str] = &["hub-wds1", "apiserver-wds1", "ocm-agent-cluster1"];
/// Deeper than serde_json reads (128), as the custom resource.
const TOO_DEEP: usize = 130;

pub fn tests() -> Vec<StackTest> {
    vec![
        stack_test!(deep_content_is_an_error_not_an_empty_spec, COMPONENTS),
        stack_test!(a_template_error_holds_back_nothing_else, COMPONENTS),
    ]
}

/// Labels the namespace `ns` of the WDS (so the policy delivers it too, and its objects can land).
async fn label_namespace(wds: &Client, ns: &str, labels: &Value) -> anyhow::Result<()> {
    let patch = json!({"metadata": {"labels": labels}});
    Api::<Namespace>::all(wds.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Sends the objects labelled `selector` to cluster1 with the policy `name`.
async fn send_to_cluster1(wds: &Client, name: &str, selector: &Value) -> anyhow::Result<()> {
    apply(
        &Api::<BindingPolicy>::all(wds.clone()),
        json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
               "metadata": {"name": name},
               "spec": {"clusterSelectors": [{"matchLabels": {"name": "cluster1"}}],
                        "downsync": [{"objectSelectors": [{"matchLabels": selector}]}]}}),
    )
    .await?;
    Ok(())
}

/// Waits until the Binding `name`, at its generation, reports an error containing each of `what`.
async fn reported(wds: &Client, name: &str, what: &[&str]) -> anyhow::Result<Vec<String>> {
    let bindings: Api<Binding> = Api::all(wds.clone());
    let shows = |b: Option<&Binding>| {
        b.is_some_and(|b| {
            let status = b.status.clone().unwrap_or_default();
            status.observed_generation == b.metadata.generation.unwrap_or_default()
                && status.errors.iter().any(|e| what.iter().all(|w| e.contains(w)))
        })
    };
    let binding = wait_until(bindings, name, &format!("reporting {what:?}"), DEADLINE, shows).await?;
    Ok(binding.and_then(|b| b.status).map(|s| s.errors).unwrap_or_default())
}

/// Waits until the policy `name` shows an error containing each of `what` (`kubectl get bp`).
async fn policy_reports(wds: &Client, name: &str, what: &[&str]) -> anyhow::Result<()> {
    let shows = |p: Option<&BindingPolicy>| {
        p.and_then(|p| p.status.as_ref())
            .is_some_and(|s| s.errors.iter().any(|e| what.iter().all(|w| e.contains(w))))
    };
    wait_until(Api::all(wds.clone()), name, "showing the error", DEADLINE, shows).await?;
    Ok(())
}

/// `[[[ … [1] … ]]]`, `levels` lists deep.
fn nested_list(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

/// `{"a": {"a": … {"a": 1} … }}`, `levels` maps deep.
fn nested_map(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!({"a": inner}))
}

/// A namespaced CRD whose `spec` keeps whatever it is given, in group `group`.
fn crd(group: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": format!("widgets.{group}")},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                      "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

/// Server-side applies `object` without reading the reply: a reply nested deeper than serde_json
/// reads would fail here after the write succeeded.
async fn apply_unread(client: &Client, resource: &ApiResource, ns: &str, object: &Value) -> anyhow::Result<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let request = kube::core::Request::new(DynamicObject::url_path(resource, Some(ns))).patch(
        name,
        &PatchParams::apply("ks-tests").force(),
        &Patch::Apply(object),
    )?;
    client.request_text(request).await?;
    Ok(())
}

/// Defect 3: a custom resource updated with a spec nested deeper than serde_json reads was
/// delivered with an empty spec (the cache read its content as `{}`), and nothing was reported.
/// Its error is on the Binding, cluster1 keeps its previous spec, a new object nested as deep in
/// its maps (which makes its `managedFields` as deep) is reported too, not unseen, and the other
/// objects of the same resource and policy still flow.
async fn deep_content_is_an_error_not_an_empty_spec(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let wec = ctx.client("cluster1").await?;
    let ns = ctx.namespace("wds1").await?;
    let group = format!("{}.integrity.example.io", ctx.unique_name("deep"));
    for client in [&wds, &wec] {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        apply(&crds, crd(&group)).await?;
        let name = format!("widgets.{group}");
        wait_until(crds, &name, "established", DEADLINE, conditions::is_crd_established()).await?;
    }
    let widget = ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    let object = |name: &str, spec: Value| {
        json!({"apiVersion": widget.api_version, "kind": "Widget",
               "metadata": {"name": name, "namespace": ns, "labels": selector}, "spec": spec})
    };
    let shallow = json!({"list": [1], "note": "first"});
    for (name, spec) in [("deep", shallow.clone()), ("other", json!({"v": 1}))] {
        apply_unread(&wds, &widget, &ns, &object(name, spec)).await?;
    }
    let policy = format!("{ns}-deep");
    send_to_cluster1(&wds, &policy, &selector).await?;
    let on_wec: Api<DynamicObject> = Api::namespaced_with(wec.clone(), &ns, &widget);
    let spec_is = |spec: Value| move |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["spec"] == spec);
    wait_until(on_wec.clone(), "deep", "delivered", DEADLINE, spec_is(shallow.clone())).await?;
    wait_until(on_wec.clone(), "other", "delivered", DEADLINE, spec_is(json!({"v": 1}))).await?;

    let deep = json!({"list": nested_list(TOO_DEEP), "note": "second"});
    apply_unread(&wds, &widget, &ns, &object("deep", deep)).await?;
    apply_unread(
        &wds,
        &widget,
        &ns,
        &object("deepmap", json!({"m": nested_map(TOO_DEEP)})),
    )
    .await?;
    reported(&wds, &policy, &[&format!("Widget.{group}({ns}/deep)")]).await?;
    let errors = reported(&wds, &policy, &[&format!("Widget.{group}({ns}/deepmap)")]).await?;
    policy_reports(&wds, &policy, &[&format!("({ns}/deep)")]).await?;

    // The same resource and policy still flow; once this update is there, what the transport
    // wrote for `deep` alongside it is there too.
    apply_unread(&wds, &widget, &ns, &object("other", json!({"v": 2}))).await?;
    wait_until(on_wec.clone(), "other", "updated", DEADLINE, spec_is(json!({"v": 2}))).await?;
    let kept = on_wec.get("deep").await?;
    anyhow::ensure!(
        kept.data["spec"] == shallow,
        "cluster1's copy of deep lost its last good spec: {} (Binding errors: {errors:?})",
        kept.data["spec"]
    );
    anyhow::ensure!(on_wec.get_opt("deepmap").await?.is_none(), "deepmap was delivered");

    Api::<BindingPolicy>::all(wds.clone())
        .delete(&policy, &DeleteParams::default())
        .await?;
    ctx.delete_namespace("wds1", &ns).await?;
    for client in [&wds, &wec] {
        Api::<CustomResourceDefinition>::all(client.clone())
            .delete(&format!("widgets.{group}"), &DeleteParams::default())
            .await?;
    }
    Ok(())
}

fn config_map(name: &str, labels: &Value, annotations: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels, "annotations": annotations}, "data": data})
}

/// Defect 7: a ConfigMap whose template's output exceeds what expansion allows was reported, and
/// then nothing else of its policy reached the WEC (`kubectl get bp`: `WECS 0/1`). It keeps its last good
/// content on cluster1 and is reported; a ConfigMap and a Namespace added afterwards arrive, an
/// update of another ConfigMap arrives, and the WEC counts as complete.
async fn a_template_error_holds_back_nothing_else(ctx: Ctx) -> anyhow::Result<()> {
    let wds = ctx.client("wds1").await?;
    let wec = ctx.client("cluster1").await?;
    let ns = ctx.namespace("wds1").await?;
    let selector = json!({"app.kubernetes.io/part-of": ns});
    label_namespace(&wds, &ns, &selector).await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(wds.clone(), &ns);
    let expand = json!({EXPAND_TEMPLATES_ANNOTATION: "true"});
    apply(
        &config_maps,
        config_map("cm1", &selector, expand.clone(), json!({"v": "{{.clusterName}}-1"})),
    )
    .await?;
    apply(&config_maps, config_map("cm2", &selector, json!({}), json!({"v": "1"}))).await?;
    let policy = format!("{ns}-templates");
    send_to_cluster1(&wds, &policy, &selector).await?;
    let on_wec: Api<ConfigMap> = Api::namespaced(wec.clone(), &ns);
    let holds = |value: &'static str| {
        move |c: Option<&ConfigMap>| {
            c.and_then(|c| c.data.as_ref())
                .and_then(|d| d.get("v"))
                .is_some_and(|v| v == value)
        }
    };
    wait_until(on_wec.clone(), "cm1", "expanded", DEADLINE, holds("cluster1-1")).await?;
    wait_until(on_wec.clone(), "cm2", "delivered", DEADLINE, holds("1")).await?;

    let bomb = json!({"v": "{{printf \"%3000000s\" .clusterName}}"});
    apply(&config_maps, config_map("cm1", &selector, expand, bomb)).await?;
    reported(
        &wds,
        &policy,
        &[&format!("cluster1/ConfigMap({ns}/cm1).data.v: template: ")],
    )
    .await?;
    policy_reports(&wds, &policy, &[&format!("ConfigMap({ns}/cm1)")]).await?;

    // Everything else of the policy flows: a new ConfigMap, an update, a new Namespace.
    apply(&config_maps, config_map("cm3", &selector, json!({}), json!({"v": "3"}))).await?;
    apply(&config_maps, config_map("cm2", &selector, json!({}), json!({"v": "2"}))).await?;
    let added = ctx.namespace("wds1").await?;
    label_namespace(&wds, &added, &selector).await?;
    wait_until(on_wec.clone(), "cm3", "delivered", DEADLINE, holds("3")).await?;
    wait_until(on_wec.clone(), "cm2", "updated", DEADLINE, holds("2")).await?;
    let namespaces: Api<Namespace> = Api::all(wec.clone());
    wait_until(namespaces, &added, "delivered", DEADLINE, |n: Option<&Namespace>| {
        n.is_some()
    })
    .await?;
    let kept = on_wec.get("cm1").await?;
    anyhow::ensure!(
        kept.data.as_ref().and_then(|d| d.get("v")).map(String::as_str) == Some("cluster1-1"),
        "cm1 lost its last good content on cluster1: {:?}",
        kept.data
    );
    // `kubectl get bp`: the WEC holds every object, applied and available.
    let complete = |p: Option<&BindingPolicy>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.propagation.as_ref())
            .is_some_and(|p| p.wecs == "1/1")
    };
    wait_until(Api::all(wds.clone()), &policy, "WECS 1/1", DEADLINE, complete).await?;

    Api::<BindingPolicy>::all(wds.clone())
        .delete(&policy, &DeleteParams::default())
        .await?;
    ctx.delete_namespace("wds1", &added).await?;
    ctx.delete_namespace("wds1", &ns).await
}
