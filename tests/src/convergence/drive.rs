//! Carrying out an operation the way a user does: with kubectl, against the stack.

use anyhow::Context;
use serde_json::Value;

use super::manifests;
use super::names::{FIELD_MANAGER, ITS, Names, WDS, WECS};
use super::ops::{Labels, Op, Style};
use super::oracle::Model;
use crate::tools::Tools;

/// `kubectl label`/`annotate` arguments taking `old` to `new`.
fn changes(old: &Labels, new: &Labels) -> Vec<String> {
    let set = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}={v}"));
    let removed = old.keys().filter(|k| !new.contains_key(*k)).map(|k| format!("{k}-"));
    set.chain(removed).collect()
}

/// Runs one kubectl command in `context`, with `input` as its standard input if any.
fn kubectl(tools: &Tools, context: &str, args: &[&str], input: Option<&Value>) -> anyhow::Result<()> {
    match input {
        Some(object) => tools.kubectl_input(context, args, &object.to_string())?,
        None => tools.kubectl(context, args)?,
    };
    Ok(())
}

/// kubectl writing the whole of `object` the way `style` does.
fn write(tools: &Tools, style: Style, object: &Value, exists: bool) -> anyhow::Result<()> {
    let manager = format!("--field-manager={FIELD_MANAGER}");
    let args: &[&str] = match (style, exists) {
        (Style::Imperative, false) => &["create", "-f", "-"],
        (Style::ClientSideApply, _) => &["apply", "-f", "-"],
        (Style::ServerSideApply, _) => &["apply", "--server-side", &manager, "-f", "-"],
        (Style::Imperative, true) => anyhow::bail!("an imperative object is changed piece by piece"),
    };
    kubectl(tools, WDS, args, Some(object))
}

/// Carries out `op`, which `model` (the state before it) accepts.
pub fn run(tools: &Tools, model: &Model, op: &Op) -> anyhow::Result<()> {
    let names = &model.names;
    let widgets = names.widgets.as_str();
    let delete = |context: &str, resource: &str, name: &str, namespace: Option<&str>| {
        let mut args = vec!["delete", resource, name, "--timeout=120s"];
        if let Some(namespace) = namespace {
            args.extend(["-n", namespace]);
        }
        kubectl(tools, context, &args, None)
    };
    let label = |context: &str, verb: &str, target: &[&str], changes: Vec<String>| {
        if changes.is_empty() {
            return Ok(());
        }
        let mut args = vec![verb, "--overwrite"];
        args.extend(target);
        args.extend(changes.iter().map(String::as_str));
        kubectl(tools, context, &args, None)
    };
    let result = match op {
        Op::CreateNamespace { ns, labels } => kubectl(
            tools,
            WDS,
            &["apply", "-f", "-"],
            Some(&manifests::namespace(names, *ns, labels)),
        ),
        Op::LabelNamespace { ns, labels } => {
            let old = model.namespace_labels(*ns).unwrap_or_default();
            label(
                WDS,
                "label",
                &["namespace", &names.namespace(*ns)],
                changes(&old, labels),
            )
        }
        Op::DeleteNamespace { ns } => delete(WDS, "namespace", &names.namespace(*ns), None),
        Op::Create {
            kind,
            ns,
            name,
            style,
            state,
        } => write(
            tools,
            *style,
            &manifests::object(names, *kind, *ns, *name, state),
            false,
        ),
        Op::Update { kind, ns, name, state } => {
            let old = model
                .object(*kind, *ns, *name)
                .context("updating an object that is not there")?;
            match old.style {
                Style::Imperative => {
                    let resource = kind.kubectl_resource(widgets);
                    let namespace = names.namespace(*ns);
                    let target = [resource.as_str(), &Names::object(*name), "-n", &namespace];
                    label(WDS, "label", &target, changes(&old.state.labels, &state.labels))?;
                    label(
                        WDS,
                        "annotate",
                        &target,
                        changes(&old.state.annotations, &state.annotations),
                    )?;
                    let patch = manifests::merge_patch(
                        &manifests::content(*kind, old.state.variant),
                        &manifests::content(*kind, state.variant),
                    );
                    if patch.as_object().is_some_and(|p| !p.is_empty()) {
                        let patch = patch.to_string();
                        let mut args = vec!["patch"];
                        args.extend(target);
                        args.extend(["--type", "merge", "-p", &patch]);
                        kubectl(tools, WDS, &args, None)?;
                    }
                    Ok(())
                }
                style => write(tools, style, &manifests::object(names, *kind, *ns, *name, state), true),
            }
        }
        Op::Delete { kind, ns, name } => delete(
            WDS,
            &kind.kubectl_resource(widgets),
            &Names::object(*name),
            Some(&names.namespace(*ns)),
        ),
        Op::ApplyPolicy { policy, spec } => kubectl(
            tools,
            WDS,
            &["apply", "-f", "-"],
            Some(&manifests::policy(names, *policy, spec)),
        ),
        Op::DeletePolicy { policy } => delete(WDS, "bindingpolicy", &names.policy(*policy), None),
        Op::ApplyTransform { transform, remove } => kubectl(
            tools,
            WDS,
            &["apply", "-f", "-"],
            Some(&manifests::transform(names, *transform, remove)),
        ),
        Op::DeleteTransform { transform } => delete(WDS, "customtransform", &names.transform(*transform), None),
        Op::LabelWec { wec, key, on } => {
            let key = names.wec_label(*key);
            let change = if *on { format!("{key}=on") } else { format!("{key}-") };
            label(
                ITS,
                "label",
                &["managedcluster", WECS[usize::from(*wec) % 2]],
                vec![change],
            )
        }
        Op::ForeignWork { work, wec, named_after } => kubectl(
            tools,
            ITS,
            &["create", "-f", "-"],
            Some(&manifests::foreign_work(names, *work, *wec, *named_after)),
        ),
    };
    result.with_context(|| serde_json::to_string(op).unwrap_or_default())
}

/// Removes what the episode of `model` made, as its user would: policies, CustomTransforms,
/// foreign ManifestWorks, WEC labels and Namespaces (with what they hold). Deletes do not wait:
/// the caller waits for the stack to show nothing of the episode.
pub fn clean_up(tools: &Tools, model: &Model) -> anyhow::Result<()> {
    let names = &model.names;
    let mut policies: Vec<String> = model.policies().iter().map(|p| names.policy(*p)).collect();
    policies.push(names.base_policy());
    let transforms: Vec<String> = model.transforms().iter().map(|t| names.transform(*t)).collect();
    let namespaces: Vec<String> = model.live_namespaces().iter().map(|ns| names.namespace(*ns)).collect();
    for (context, resource, objects) in [
        (WDS, "bindingpolicy", policies),
        (WDS, "customtransform", transforms),
        (WDS, "namespace", namespaces),
    ] {
        if !objects.is_empty() {
            let mut args = vec!["delete", resource, "--ignore-not-found", "--wait=false"];
            args.extend(objects.iter().map(String::as_str));
            kubectl(tools, context, &args, None)?;
        }
    }
    for (_, mailbox, name) in model.foreign_works() {
        let args = [
            "delete",
            "manifestwork",
            "-n",
            &mailbox,
            &name,
            "--ignore-not-found",
            "--wait=false",
        ];
        kubectl(tools, ITS, &args, None)?;
    }
    for (wec, name) in WECS.iter().enumerate() {
        let keys: Vec<String> = (0..super::ops::WEC_LABELS)
            .filter(|key| model.wec_has_label(wec as u8, *key))
            .map(|key| format!("{}-", names.wec_label(key)))
            .collect();
        if !keys.is_empty() {
            let mut args = vec!["label", "managedcluster", name];
            args.extend(keys.iter().map(String::as_str));
            kubectl(tools, ITS, &args, None)?;
        }
    }
    Ok(())
}

/// Installs the run's CRD in every space the test uses and waits until each serves it.
pub fn install_crd(tools: &Tools, names: &Names) -> anyhow::Result<()> {
    let crd = manifests::crd(names);
    let established = format!("crd/{}", names.crd());
    for space in std::iter::once(WDS).chain(WECS) {
        kubectl(tools, space, &["apply", "-f", "-"], Some(&crd))?;
        let args = ["wait", "--for=condition=established", "--timeout=60s", &established];
        kubectl(tools, space, &args, None)?;
    }
    Ok(())
}

/// Deletes the run's CRD everywhere (and with it any widget left).
pub fn remove_crd(tools: &Tools, names: &Names) -> anyhow::Result<()> {
    for space in std::iter::once(WDS).chain(WECS) {
        let args = ["delete", "crd", &names.crd(), "--ignore-not-found", "--wait=false"];
        kubectl(tools, space, &args, None)?;
    }
    Ok(())
}

/// The labels of each WEC's ManagedCluster now.
pub fn wec_labels(tools: &Tools) -> anyhow::Result<[Labels; 2]> {
    let read = |wec: &str| -> anyhow::Result<Labels> {
        let json: Value = serde_json::from_str(&tools.kubectl(ITS, &["get", "managedcluster", wec, "-o", "json"])?)?;
        Ok(serde_json::from_value(json["metadata"]["labels"].clone())?)
    };
    Ok([read(WECS[0])?, read(WECS[1])?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convergence::names::Kind;

    #[test]
    fn label_changes_set_and_remove() {
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let old: Labels = labels(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let new: Labels = labels(&[("a", "1"), ("b", "9"), ("d", "4")]);
        assert_eq!(changes(&old, &new), ["b=9", "d=4", "c-"]);
    }

    #[test]
    fn every_kind_has_a_kubectl_resource() {
        assert_eq!(Kind::Deployment.kubectl_resource("w.io"), "deployments.apps");
        assert_eq!(Kind::Widget.kubectl_resource("w.io"), "widgets.w.io");
        assert_eq!(Kind::Secret.kubectl_resource("w.io"), "secrets");
    }
}
