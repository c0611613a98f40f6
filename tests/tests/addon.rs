//! End-to-end test of the status add-on as users install it: the stack installs the chart
//! `charts/ks-status-addon` on its1 with helm, and the stand-in kubelet runs its controller
//! (`ks-addon`). Through the chart's Placement, OCM enables the add-on on every WEC; ks-addon must
//! have delivered the agent (which the stand-in kubelet runs from target/debug) with the chart's
//! trace endpoint, got the agent a hub credential through a CSR it approved, reported the add-on
//! Available, and kept the agent's credentials confined. A WEC added later (cluster3, with an
//! AddOnDeploymentConfig giving its agent another image and a free port) gets its agent too, and
//! its removal takes everything away.
//!
//! The controller's log is `.stack/logs/pod-its1-open-cluster-management-ks-status-addon.log`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ResourceQuota, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use ks_shared::api::WorkStatus;
use ks_shared::names::{self, is_kubestellar_label};
use ks_shared::ocm::{AddOnDeploymentConfig, ManagedClusterAddOn, ManifestWork};
use ks_tests::harness::{Ctx, StackTest, repo_root, run, wait_until};
use ks_tests::stack::status_addon::{ADDON_NAMESPACE, ADDON_RELEASE, QUOTA_KEY, sized_mailbox_quota};
use ks_tests::stack::{ADDON_PROCESS, JAEGER_OTLP_GRPC, Stack};
use ks_tests::tools::Tools;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::conditions;
use kube::{Client, ResourceExt};
use serde_json::json;

const MANAGER: &str = "ks-tests";
/// The AddOnDeploymentConfig this test gives every WEC's add-on.
const CONFIG: &str = "ks-addon-e2e";
const AGENT_IMAGE: &str = "example.io/ks-agent:dev";
/// The image ks-addon gives the agent when no AddOnDeploymentConfig says otherwise.
const DEFAULT_IMAGE: &str = concat!("ghcr.io/kubestellar-rs/ks-agent:", env!("CARGO_PKG_VERSION"));
const NAMESPACE: &str = names::AGENT_INSTALL_NAMESPACE;
/// Delivery, CSR signing and the agent start go through several upstream controllers.
const DELIVERY: Duration = Duration::from_secs(120);
const PROMPTLY: Duration = Duration::from_secs(30);
const WECS: [&str; 2] = ["cluster1", "cluster2"];
/// The WEC this test adds to the stack and takes away again.
const LATE_WEC: &str = "cluster3";

ks_tests::stack_main!(
    run,
    vec![StackTest {
        name: "addon_installs_registers_confines_and_follows_wecs",
        components: &[
            ADDON_PROCESS,
            "ocm-agent-cluster1",
            "ocm-agent-cluster2",
            "ocm-agent-cluster3",
            "pod-cluster1-open-cluster-management-agent-addon-status-agent",
            "pod-cluster2-open-cluster-management-agent-addon-status-agent",
            "pod-cluster3-open-cluster-management-agent-addon-status-agent",
        ],
        body: |ctx| Box::pin(addon_lifecycle(ctx)),
        alone: false,
    }]
);

/// One sequential scenario: each step needs the state the previous one reached.
async fn addon_lifecycle(ctx: Ctx) -> anyhow::Result<()> {
    let hub = ctx.client("its1").await?;
    let status = Tools::new(&ctx, "addon")?.helm(&[
        "status",
        ADDON_RELEASE,
        "--kube-context",
        "its1",
        "--namespace",
        ADDON_NAMESPACE,
        "-o",
        "json",
    ])?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    ensure!(
        status["info"]["status"] == "deployed",
        "the add-on chart's release: {status}"
    );
    ctx.stack.procs.check_alive(ADDON_PROCESS)?;
    for wec in WECS {
        agent_is_delivered(&ctx, &hub, wec, DEFAULT_IMAGE)
            .await
            .with_context(|| format!("on {wec}"))?;
    }
    mailbox_quota_counts_work_statuses(&hub, WECS[0]).await?;
    impostor_is_not_approved(&hub, &ctx.stack.procs.log_file(ADDON_PROCESS)).await?;
    for (wec, other) in [(WECS[0], WECS[1]), (WECS[1], WECS[0])] {
        hub_credential_is_confined(&ctx, wec, other)
            .await
            .with_context(|| format!("{wec}'s hub credential"))?;
    }
    agent_cannot_write_workloads(&ctx, WECS[0]).await?;
    wec_added_later_gets_the_agent(&ctx, &hub)
        .await
        .with_context(|| format!("{LATE_WEC}, added later"))
}

/// A WEC joining after the controller started gets the add-on, configured by its
/// AddOnDeploymentConfig; taking the WEC away removes the add-on and what it delivered.
async fn wec_added_later_gets_the_agent(ctx: &Ctx, hub: &Client) -> anyhow::Result<()> {
    remove_decided_csrs(hub, LATE_WEC).await?;
    let stack = Stack::new(&repo_root(), 3, &ctx.stack.our_binaries)?;
    ensure!(stack.wec_names().last().map(String::as_str) == Some(LATE_WEC));
    let outcome = async {
        stack.up().await?;
        create_deployment_config(hub, LATE_WEC).await?;
        let addons: Api<ManagedClusterAddOn> = Api::namespaced(hub.clone(), LATE_WEC);
        let created = wait_until(
            addons.clone(),
            names::STATUS_ADDON_NAME,
            "created",
            PROMPTLY,
            |a: Option<&ManagedClusterAddOn>| a.is_some(),
        )
        .await?
        .context("add-on")?;
        ensure!(
            created
                .managed_fields()
                .iter()
                .any(|f| f.manager.as_deref() == Some(names::field_manager::ADDON)),
            "the add-on was not created by ks-addon"
        );
        let patch = json!({"spec": {"configs": [{"group": "addon.open-cluster-management.io",
            "resource": "addondeploymentconfigs", "namespace": LATE_WEC, "name": CONFIG}]}});
        addons
            .patch(names::STATUS_ADDON_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        agent_is_delivered(ctx, hub, LATE_WEC, AGENT_IMAGE).await
    }
    .await;
    let delivered = cluster_namespace_objects(hub, LATE_WEC).await;
    stack.remove_wec(LATE_WEC).await?;
    outcome?;
    let (addon, work, role, binding) = delivered?;
    deleted(Api::<ManagedClusterAddOn>::namespaced(hub.clone(), LATE_WEC), &addon).await?;
    deleted(Api::<ManifestWork>::namespaced(hub.clone(), LATE_WEC), &work).await?;
    deleted(Api::<Role>::namespaced(hub.clone(), LATE_WEC), &role).await?;
    deleted(Api::<RoleBinding>::namespaced(hub.clone(), LATE_WEC), &binding).await
}

/// The add-on's objects in a cluster namespace of the hub.
async fn cluster_namespace_objects(
    hub: &Client,
    wec: &str,
) -> anyhow::Result<(ManagedClusterAddOn, ManifestWork, Role, RoleBinding)> {
    Ok((
        Api::<ManagedClusterAddOn>::namespaced(hub.clone(), wec)
            .get(names::STATUS_ADDON_NAME)
            .await?,
        Api::<ManifestWork>::namespaced(hub.clone(), wec)
            .get(names::STATUS_ADDON_MANIFESTWORK)
            .await?,
        Api::<Role>::namespaced(hub.clone(), wec)
            .get(names::STATUS_ADDON_HUB_ROLE)
            .await?,
        Api::<RoleBinding>::namespaced(hub.clone(), wec)
            .get(names::STATUS_ADDON_HUB_ROLE)
            .await?,
    ))
}

/// The agent reaches the WEC through the ManifestWork, gets its hub credential through a CSR
/// that ks-addon approved, runs, and the add-on becomes Available.
async fn agent_is_delivered(ctx: &Ctx, hub: &Client, wec: &str, image: &str) -> anyhow::Result<()> {
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), wec);
    let configured = |w: Option<&ManifestWork>| {
        w.is_some_and(|w| {
            let applied = w
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .any(|c| c.type_ == "Applied" && c.status == "True");
            // With an AddOnDeploymentConfig, its image reached the agent's Deployment.
            applied && serde_json::to_string(&w.spec).is_ok_and(|s| s.contains(image))
        })
    };
    let work = wait_until(
        works,
        names::STATUS_ADDON_MANIFESTWORK,
        "applied with the expected image",
        DELIVERY,
        configured,
    )
    .await?
    .context("ManifestWork")?;
    ensure!(
        !work.labels().keys().any(|k| is_kubestellar_label(k)),
        "the agent's ManifestWork carries KubeStellar labels: {:?}",
        work.labels()
    );

    let local = ctx.client(wec).await?;
    let deployments: Api<Deployment> = Api::namespaced(local.clone(), NAMESPACE);
    // As the ManifestWork says now (an earlier rendering may have been applied first).
    let current = |d: Option<&Deployment>| {
        d.and_then(|d| d.spec.as_ref())
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .is_some_and(|c| c.image.as_deref() == Some(image))
    };
    let deployment = wait_until(
        deployments,
        names::STATUS_AGENT_DEPLOYMENT,
        "delivered with the expected image",
        DELIVERY,
        current,
    )
    .await?
    .context("Deployment")?;
    let container = deployment
        .spec
        .context("spec")?
        .template
        .spec
        .context("pod")?
        .containers
        .into_iter()
        .next()
        .context("container")?;
    let env = serde_json::to_value(&container.env)?;
    // The chart's agent.otlpEndpoint, through ks-addon's --agent-otlp-endpoint; with the
    // AddOnDeploymentConfig, its log filter and rate limit too.
    let mut expected =
        vec![json!({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": format!("http://127.0.0.1:{JAEGER_OTLP_GRPC}")})];
    let configured = image == AGENT_IMAGE;
    if configured {
        expected.push(json!({"name": "RUST_LOG", "value": TUNED_LOG_LEVEL}));
    }
    ensure!(env == json!(expected), "the agent's environment: {env}");
    let tuned = container.args.iter().flatten().any(|a| a == TUNED_FLAG);
    ensure!(tuned == configured, "the agent's arguments: {:?}", container.args);
    let secrets: Api<Secret> = Api::namespaced(local, NAMESPACE);
    wait_until(
        secrets,
        names::STATUS_ADDON_HUB_SECRET,
        "written",
        DELIVERY,
        |s: Option<&Secret>| s.is_some_and(|s| s.data.as_ref().is_some_and(|d| d.contains_key("tls.crt"))),
    )
    .await?;

    let csrs: Api<CertificateSigningRequest> = Api::all(hub.clone());
    let ours = ListParams::default().labels(&format!(
        "{}={wec},{}={}",
        names::OCM_CLUSTER_NAME_LABEL,
        names::OCM_ADDON_NAME_LABEL,
        names::STATUS_ADDON_NAME
    ));
    let approved_by_us = csrs.list(&ours).await?.iter().any(|csr| {
        csr.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.type_ == "Approved" && c.reason.as_deref() == Some(names::STATUS_ADDON_CSR_APPROVAL_REASON))
    });
    ensure!(approved_by_us, "no addon-status CSR for {wec} approved by ks-addon");

    let pod = Stack::agent_process(wec);
    ks_tests::stack::wait_for(&format!("{pod} to run"), DELIVERY, || async {
        Ok(ctx.stack.procs.running(&pod).is_some())
    })
    .await?;

    let addons: Api<ManagedClusterAddOn> = Api::namespaced(hub.clone(), wec);
    let available = |a: Option<&ManagedClusterAddOn>| {
        a.and_then(|a| a.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
    };
    let addon = wait_until(addons, names::STATUS_ADDON_NAME, "Available", DELIVERY, available)
        .await?
        .context("add-on")?;
    let status = addon.status.unwrap_or_default();
    ensure!(
        status.namespace.as_deref() == Some(NAMESPACE),
        "status.namespace {:?}",
        status.namespace
    );
    let registration = status.registrations.first().context("no registration declared")?;
    ensure!(
        registration.subject.user
            == format!("system:open-cluster-management:cluster:{wec}:addon:addon-status:agent:addon-status-agent"),
        "registration user {}",
        registration.subject.user
    );
    Ok(())
}

/// A CSR asking for cluster1's agent identity, labelled like the registration agent's, but
/// requested by someone else (the stack's admin).
async fn create_impostor_csr(hub: &Client) -> anyhow::Result<String> {
    let name = format!("ks-addon-e2e-impostor-{}", std::process::id());
    let request = include_bytes!("../../addon/src/testdata/agent-cluster1.csr.pem");
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {
            names::OCM_CLUSTER_NAME_LABEL: WECS[0],
            names::OCM_ADDON_NAME_LABEL: names::STATUS_ADDON_NAME,
        }},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["digital signature", "key encipherment", "client auth"],
        },
    }))?;
    Api::<CertificateSigningRequest>::all(hub.clone())
        .create(&PostParams::default(), &csr)
        .await
        .context("creating the impostor CSR")?;
    Ok(name)
}

/// With the add-on enabled on cluster1, ks-addon considers the impostor's CSR (it logs its
/// verdict) and leaves it undecided, because of who asked.
async fn impostor_is_not_approved(hub: &Client, log: &Path) -> anyhow::Result<()> {
    let name = create_impostor_csr(hub).await?;
    let considered = format!("csr={name} ");
    let mut verdict = String::new();
    ks_tests::stack::wait_for("ks-addon to consider the impostor CSR", PROMPTLY, || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        verdict = text
            .lines()
            .find(|l| l.contains(&considered))
            .unwrap_or_default()
            .to_string();
        std::future::ready(Ok(!verdict.is_empty()))
    })
    .await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.clone());
    let csr = csrs.get(&name).await?;
    csrs.delete(&name, &DeleteParams::default()).await?;
    let conditions = csr.status.and_then(|s| s.conditions).unwrap_or_default();
    ensure!(conditions.is_empty(), "the impostor CSR was decided: {conditions:?}");
    ensure!(
        verdict.contains("not approved") && verdict.contains("requester"),
        "not turned down for its requester: {verdict}"
    );
    Ok(())
}

/// The quota on WorkStatuses in `wec`'s mailbox (the stack leaves `--max-work-statuses` at its
/// default, `auto`) is sized from what KubeStellar delivers there, and counts exactly the
/// WorkStatuses there: its key names them right.
async fn mailbox_quota_counts_work_statuses(hub: &Client, wec: &str) -> anyhow::Result<()> {
    sized_mailbox_quota(hub, wec, PROMPTLY).await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(hub.clone(), wec);
    let statuses: Api<WorkStatus> = Api::namespaced(hub.clone(), wec);
    ks_tests::stack::wait_for("the mailbox quota to count the WorkStatuses", PROMPTLY, || async {
        let Some(quota) = quotas.get_opt("addon-status-workstatuses").await? else {
            return Ok(false);
        };
        let used = quota.status.and_then(|s| s.used?.remove(QUOTA_KEY));
        let listed = statuses.list(&ListParams::default()).await?.items.len();
        Ok(used.is_some_and(|u| u.0 == listed.to_string()))
    })
    .await
}

/// With the certificate the registration agent got for `wec`'s agent, WorkStatuses can be
/// written in `wec`'s mailbox namespace and not in `other`'s.
async fn hub_credential_is_confined(ctx: &Ctx, wec: &str, other: &str) -> anyhow::Result<()> {
    let agent = agent_hub_client(ctx, wec).await?;
    let name = format!("ks-addon-e2e-{}", std::process::id());
    let own: Api<WorkStatus> = Api::namespaced(agent.clone(), wec);
    own.create(&PostParams::default(), &work_status(&name, wec)?)
        .await
        .context("creating a WorkStatus in its own mailbox")?;
    own.delete(&name, &DeleteParams::default())
        .await
        .context("deleting it again")?;
    let foreign: Api<WorkStatus> = Api::namespaced(agent.clone(), other);
    match foreign
        .create(&PostParams::default(), &work_status(&name, other)?)
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        Err(err) => bail!("creating a WorkStatus in {other}'s mailbox: want 403, got {err}"),
        Ok(_) => {
            foreign.delete(&name, &DeleteParams::default()).await?;
            bail!("created a WorkStatus in {other}'s mailbox")
        }
    }
    let works: Api<ManifestWork> = Api::namespaced(agent, other);
    ensure!(
        works.list(&ListParams::default()).await.is_err(),
        "listed ManifestWorks in {other}'s mailbox"
    );
    Ok(())
}

fn work_status(name: &str, namespace: &str) -> anyhow::Result<WorkStatus> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "WorkStatus",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"sourceRef": {"group": "apps", "version": "v1", "resource": "deployments",
                               "kind": "Deployment", "name": "probe", "namespace": "default"}},
    }))?)
}

/// A hub client with the agent's credential: the Secret's files in a directory of their own,
/// and its kubeconfig pointed at them (in the Pod they are under /var/run/hub).
async fn agent_hub_client(ctx: &Ctx, wec: &str) -> anyhow::Result<Client> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client(wec).await?, NAMESPACE);
    let secret = secrets.get(names::STATUS_ADDON_HUB_SECRET).await?;
    let data = secret.data.unwrap_or_default();
    let dir = ctx
        .stack
        .state
        .join("tmp")
        .join(format!("ks-addon-e2e-{}-{wec}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let client = client_from_files(&dir, &data).await;
    // The directory holds the agent's private key: gone whatever happened.
    std::fs::remove_dir_all(&dir)?;
    client
}

async fn client_from_files(dir: &Path, data: &BTreeMap<String, ByteString>) -> anyhow::Result<Client> {
    for (key, value) in data {
        std::fs::write(dir.join(key), &value.0)?;
    }
    let mut kubeconfig = Kubeconfig::read_from(dir.join("kubeconfig")).context("the Secret's kubeconfig")?;
    let file = |key: &str| -> anyhow::Result<String> {
        ensure!(data.contains_key(key), "the Secret has no {key}");
        Ok(path_string(&dir.join(key)))
    };
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.client_certificate = Some(file("tls.crt")?);
            auth.client_key = Some(file("tls.key")?);
        }
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn path_string(path: &Path) -> String {
    path.display().to_string()
}

/// On the WEC, the agent's ServiceAccount may read workloads but never write them.
async fn agent_cannot_write_workloads(ctx: &Ctx, wec: &str) -> anyhow::Result<()> {
    let reviews: Api<SubjectAccessReview> = Api::all(ctx.client(wec).await?);
    let service_account = format!(
        "system:serviceaccount:{NAMESPACE}:{}",
        names::STATUS_AGENT_SERVICE_ACCOUNT
    );
    let can = |verb: &'static str, group: &'static str, resource: &'static str| {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(service_account.clone()),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{NAMESPACE}"),
                    "system:authenticated".into(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    namespace: Some("default".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviews = reviews.clone();
        async move {
            let answer = reviews.create(&PostParams::default(), &review).await?;
            anyhow::Ok(answer.status.is_some_and(|s| s.allowed))
        }
    };
    for (verb, group, resource) in [("get", "apps", "deployments"), ("watch", "", "configmaps")] {
        ensure!(can(verb, group, resource).await?, "the agent cannot {verb} {resource}");
    }
    for (verb, group, resource) in [
        ("create", "apps", "deployments"),
        ("update", "apps", "deployments"),
        ("patch", "apps", "deployments"),
        ("delete", "apps", "deployments"),
        ("create", "", "secrets"),
        // It reports on delivered Secrets from what was delivered, never reading one.
        ("get", "", "secrets"),
        ("list", "", "secrets"),
        ("watch", "", "secrets"),
    ] {
        ensure!(
            !can(verb, group, resource).await?,
            "the agent may {verb} {resource} on {wec}"
        );
    }
    Ok(())
}

/// Waits until `object` is deleted (a new object of the same name would not count).
async fn deleted<K>(api: Api<K>, object: &K) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let uid = object.uid().unwrap_or_default();
    let name = object.name_any();
    wait_until(api, &name, "deleted", DELIVERY, conditions::is_deleted(&uid))
        .await
        .with_context(|| format!("{} {name} of the deleted add-on", K::kind(&Default::default())))?;
    Ok(())
}

/// What [`create_deployment_config`] tunes besides the image and the port: the agent's log filter
/// (an environment variable) and its hub rate limit (a flag).
const TUNED_LOG_LEVEL: &str = "info,ks_agent=debug";
const TUNED_FLAG: &str = "--hub-qps=7.5";

/// An AddOnDeploymentConfig for `cluster`'s add-on: this image, a free port for the agent, and
/// its log filter and hub rate limit tuned.
async fn create_deployment_config(hub: &Client, cluster: &str) -> anyhow::Result<()> {
    let configs: Api<AddOnDeploymentConfig> = Api::namespaced(hub.clone(), cluster);
    let config = json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "AddOnDeploymentConfig",
        "metadata": {"name": CONFIG, "namespace": cluster},
        "spec": {"customizedVariables": [
            {"name": "IMAGE", "value": AGENT_IMAGE},
            {"name": "HTTP_ADDRESS", "value": "127.0.0.1:0"},
            {"name": "LOG_LEVEL", "value": TUNED_LOG_LEVEL},
            {"name": "HUB_QPS", "value": "7.5"},
        ]},
    });
    configs
        .patch(CONFIG, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&config))
        .await?;
    Ok(())
}

/// Deletes the add-on's decided CSRs for `wec`: they are only records, and OCM's registration
/// agent stops requesting certificates for an add-on while 10 of its CSRs exist (the
/// controller-manager deletes them only after an hour), which repeated runs would reach.
async fn remove_decided_csrs(hub: &Client, wec: &str) -> anyhow::Result<()> {
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.clone());
    let labelled = ListParams::default().labels(&format!(
        "{}={wec},{}={}",
        names::OCM_CLUSTER_NAME_LABEL,
        names::OCM_ADDON_NAME_LABEL,
        names::STATUS_ADDON_NAME
    ));
    for csr in csrs.list(&labelled).await? {
        let decided = csr
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| !c.is_empty());
        if decided {
            csrs.delete(&csr.name_any(), &DeleteParams::default()).await?;
        }
    }
    Ok(())
}
