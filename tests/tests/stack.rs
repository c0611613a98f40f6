//! Smoke tests that prove the local stack is real: our CRDs install and accept upstream
//! KubeStellar objects, the real OCM work agent delivers a ManifestWork to a WEC (where kwok
//! makes its Pods run) and removes it again, and Lease leader election hands over.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use ks_shared::api::{BindingPolicy, CustomTransform, StatusCollector};
use ks_shared::client::Limits;
use ks_shared::crds::{self, Space};
use ks_shared::fence::Fence;
use ks_shared::leader::{LeaseConfig, run_as_leader};
use ks_shared::ocm::{AppliedManifestWork, ManifestWork};
use ks_tests::harness::{Ctx, StackTest, apply, run, wait_until};
use ks_tests::stack::kubeflex::{OPERATOR_PROCESS, control_planes};
use ks_tests::stack::{CreatedCrd, SPARE_WDS};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::conditions;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const MANAGER: &str = "ks-tests";
const DEADLINE: Duration = Duration::from_secs(90);

ks_tests::stack_main!(
    run,
    vec![
        StackTest {
            name: "crds_accept_upstream_examples",
            components: &["apiserver-wds1", "apiserver-its1"],
            body: |ctx| Box::pin(crds_accept_upstream_examples(ctx)),
            alone: false,
        },
        StackTest {
            name: "manifestwork_reaches_wec_and_leaves",
            components: &[
                "ocm-agent-cluster1",
                "controller-manager-cluster1",
                "scheduler-cluster1",
                "kwok-cluster1",
            ],
            body: |ctx| Box::pin(manifestwork_reaches_wec_and_leaves(ctx)),
            alone: false,
        },
        StackTest {
            name: "our_image_runs_as_a_local_process",
            components: &["kubelet-cluster1"],
            body: |ctx| Box::pin(our_image_runs_as_a_local_process(ctx)),
            alone: false,
        },
        StackTest {
            name: "leader_lease_hands_over",
            components: &["apiserver-wds1"],
            body: |ctx| Box::pin(leader_lease_hands_over(ctx)),
            alone: false,
        },
        StackTest {
            name: "the_stacks_helpers_take_nothing_they_did_not_make",
            components: &["apiserver-kubeflex", OPERATOR_PROCESS],
            body: |ctx| Box::pin(the_stacks_helpers_take_nothing_they_did_not_make(ctx)),
            alone: false,
        },
        StackTest {
            name: "a_leader_that_cannot_renew_stops_writing_first",
            components: &["apiserver-wds1"],
            body: |ctx| Box::pin(a_leader_that_cannot_renew_stops_writing_first(ctx)),
            alone: false,
        },
    ]
);

async fn crds_accept_upstream_examples(ctx: Ctx) -> anyhow::Result<()> {
    crds::install(&ctx.client("wds1").await?, Space::Wds, MANAGER).await?;
    crds::install(&ctx.client("its1").await?, Space::Its, MANAGER).await?;
    let wds = ctx.client("wds1").await?;
    let suffix = std::process::id();

    // As in KubeStellar's getting-started guide.
    let policies: Api<BindingPolicy> = Api::all(wds.clone());
    let policy = apply(
        &policies,
        json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
            "metadata": {"name": format!("nginx-bpolicy-{suffix}")},
            "spec": {
                "clusterSelectors": [{"matchLabels": {"location-group": "edge"}}],
                "downsync": [
                    {"objectSelectors": [{"matchLabels": {"app.kubernetes.io/name": "nginx"}}],
                     "wantSingletonReportedState": true, "statusCollectors": ["replicas"]},
                    {"apiGroup": "", "resources": ["namespaces"], "objectNames": ["nginx"], "createOnly": true}
                ]
            }
        }),
    )
    .await?;
    anyhow::ensure!(policy.spec.downsync.len() == 2 && policy.spec.downsync[1].modulation.create_only);

    let transforms: Api<CustomTransform> = Api::all(wds.clone());
    let transform = apply(
        &transforms,
        json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "CustomTransform",
            "metadata": {"name": format!("drop-owner-{suffix}")},
            "spec": {"apiGroup": "apps", "resource": "deployments", "remove": ["$.metadata.labels[\"owner\"]"]}
        }),
    )
    .await?;
    anyhow::ensure!(transform.spec.remove.len() == 1);

    let collectors: Api<StatusCollector> = Api::all(wds.clone());
    let collector = apply(
        &collectors,
        json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "StatusCollector",
            "metadata": {"name": format!("replicas-{suffix}")},
            "spec": {
                "filter": "returned.status.availableReplicas > 0",
                "groupBy": [{"name": "ready", "def": "returned.status.readyReplicas"}],
                "combinedFields": [{"name": "count", "type": "COUNT"},
                                   {"name": "total", "type": "SUM", "subject": "returned.status.availableReplicas"}],
                "limit": 10
            }
        }),
    )
    .await?;
    anyhow::ensure!(collector.spec.combined_fields.len() == 2);

    // A clause that names no test is rejected by the schema, as upstream documents.
    let bad = apply(
        &policies,
        json!({
            "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
            "metadata": {"name": format!("bad-{suffix}")},
            "spec": {"downsync": [{"createOnly": true}]}
        }),
    )
    .await;
    anyhow::ensure!(bad.is_err(), "a clause with only createOnly must be rejected");

    let delete = DeleteParams::default();
    policies.delete(&format!("nginx-bpolicy-{suffix}"), &delete).await?;
    transforms.delete(&format!("drop-owner-{suffix}"), &delete).await?;
    collectors.delete(&format!("replicas-{suffix}"), &delete).await?;
    Ok(())
}

async fn manifestwork_reaches_wec_and_leaves(ctx: Ctx) -> anyhow::Result<()> {
    let wec = ctx.client("cluster1").await?;
    let namespace = format!("smoke-{}", std::process::id());
    let work_name = format!("smoke-{}", std::process::id());
    let works: Api<ManifestWork> = Api::namespaced(ctx.client("its1").await?, "cluster1");
    let manifest_work = json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": work_name, "namespace": "cluster1"},
        "spec": {"workload": {"manifests": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "web", "namespace": namespace},
             "spec": {"replicas": 1,
                      "selector": {"matchLabels": {"app": "web"}},
                      "template": {"metadata": {"labels": {"app": "web"}},
                                   "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}
        ]}}
    });
    apply(&works, manifest_work).await?;

    let deployments: Api<Deployment> = Api::namespaced(wec.clone(), &namespace);
    let available = |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref())
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
            >= 1
    };
    wait_until(deployments.clone(), "web", "available on cluster1", DEADLINE, available).await?;

    let applied: Api<AppliedManifestWork> = Api::all(wec.clone());
    let record = applied
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|amw| amw.spec.manifest_work_name == work_name)
        .ok_or_else(|| anyhow::anyhow!("no AppliedManifestWork for {work_name} on cluster1"))?;
    let resources = record.status.map(|s| s.applied_resources).unwrap_or_default();
    anyhow::ensure!(
        resources.iter().any(|r| r.resource == "deployments" && r.name == "web"),
        "the AppliedManifestWork lists the Deployment: {resources:?}"
    );

    let uid = deployments.get("web").await?.metadata.uid.unwrap_or_default();
    works.delete(&work_name, &DeleteParams::default()).await?;
    wait_until(
        deployments,
        "web",
        "deleted from cluster1",
        DEADLINE,
        conditions::is_deleted(&uid),
    )
    .await?;
    Ok(())
}

async fn leader_lease_hands_over(ctx: Ctx) -> anyhow::Result<()> {
    let client = ctx.client("wds1").await?;
    let lease = |identity: &str| LeaseConfig {
        name: format!("smoke-leader-{}", std::process::id()),
        namespace: "kube-system".into(),
        identity: identity.into(),
        duration_seconds: 5,
    };
    let (led, mut leaders) = tokio::sync::mpsc::unbounded_channel();
    let contender = |identity: &'static str, shutdown: CancellationToken| {
        let (client, lease, led) = (client.clone(), lease(identity), led.clone());
        tokio::spawn(async move {
            run_as_leader(client, &lease, &Fence::closed(), shutdown, |token| async move {
                let _ = led.send(identity);
                token.cancelled().await;
            })
            .await
        })
    };
    let first_shutdown = CancellationToken::new();
    let first = contender("first", first_shutdown.clone());
    let got = tokio::time::timeout(DEADLINE, leaders.recv()).await?;
    anyhow::ensure!(got == Some("first"));

    let second_shutdown = CancellationToken::new();
    let second = contender("second", second_shutdown.clone());
    let leases: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "kube-system",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease")),
    );
    let holder = leases.get(&lease("x").name).await?.data["spec"]["holderIdentity"].clone();
    anyhow::ensure!(holder == "first", "the first contender holds the Lease, got {holder}");
    anyhow::ensure!(leaders.try_recv().is_err(), "the second contender must wait");

    first_shutdown.cancel();
    first.await??;
    let got = tokio::time::timeout(DEADLINE, leaders.recv()).await?;
    anyhow::ensure!(
        got == Some("second"),
        "the second contender takes over once the first steps down"
    );

    // A Lease deleted under its leader and a waiting contender is created again by one of them.
    let third_shutdown = CancellationToken::new();
    let third = contender("third", third_shutdown.clone());
    leases.delete(&lease("x").name, &Default::default()).await?;
    let name = lease("x").name;
    ks_tests::stack::wait_for("the deleted Lease to be held again", DEADLINE, || async {
        let held = leases.get_opt(&name).await?;
        Ok(held.is_some_and(|l| {
            ["second", "third"]
                .iter()
                .any(|who| l.data["spec"]["holderIdentity"] == *who)
        }))
    })
    .await?;
    second_shutdown.cancel();
    third_shutdown.cancel();
    // The leader whose Lease went may end either way.
    let _ = second.await?;
    let _ = third.await?;
    Ok(())
}

/// A TCP relay to `port` on the loopback that the test can cut: from then on nothing passes
/// either way, and connections hang (a network partition, or a client stuck behind its own
/// traffic). Returns the relay's port and the switch.
async fn relay(port: u16) -> anyhow::Result<(u16, tokio::sync::watch::Sender<bool>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let relay_port = listener.local_addr()?.port();
    let (cut, is_cut) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut is_cut = is_cut.clone();
            tokio::spawn(async move {
                if !*is_cut.borrow()
                    && let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                {
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => return,
                        _ = is_cut.wait_for(|cut| *cut) => {}
                    }
                }
                // Hold the connection open, silent, until the test ends.
                let _ = is_cut.wait_for(|_| false).await;
                drop(inbound);
            });
        }
    });
    Ok((relay_port, cut))
}

/// A leader whose Lease renewals stop getting through (its writes still would) stops writing at
/// its renewal deadline, before the standby takes the Lease over: at no instant do two leaders
/// write. Each contender's work writes a ConfigMap in a loop through a client fenced by its
/// leadership; the test compares the last write of the first with the first write of the second.
async fn a_leader_that_cannot_renew_stops_writing_first(ctx: Ctx) -> anyhow::Result<()> {
    let kubeconfig = ctx.stack.kubeconfig();
    let namespace = ctx.namespace("wds1").await?;
    let name = ctx.unique_name("partitioned-leader");
    let lease = |identity: &str| LeaseConfig {
        name: name.clone(),
        namespace: namespace.clone(),
        identity: identity.into(),
        duration_seconds: 3,
    };
    let direct = ctx.client("wds1").await?;
    let mut through_relay = ks_shared::client::config(Some(&kubeconfig), Some("wds1")).await?;
    let port = through_relay.cluster_url.port_u16().unwrap_or(443);
    let (relay_port, cut) = relay(port).await?;
    through_relay.cluster_url = format!("https://127.0.0.1:{relay_port}").parse()?;
    let through_relay = kube::Client::try_from(through_relay)?;

    // Each write's instant, by contender.
    let (wrote, mut writes) = tokio::sync::mpsc::unbounded_channel::<(&'static str, std::time::Instant)>();
    let contender = |identity: &'static str, client: kube::Client, lease: LeaseConfig, shutdown: CancellationToken| {
        let (kubeconfig, namespace, wrote) = (kubeconfig.clone(), namespace.clone(), wrote.clone());
        tokio::spawn(async move {
            let fence = Fence::closed();
            let limits = Limits {
                fence: fence.clone(),
                ..Limits::none()
            };
            let writer = ks_shared::client::limited_client(Some(&kubeconfig), Some("wds1"), &limits).await?;
            let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(writer, &namespace);
            let result = run_as_leader(client, &lease, &fence, shutdown, |token| async move {
                while !token.is_cancelled() {
                    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "written"},
                                      "data": {"by": identity}});
                    let sent = config_maps
                        .patch("written", &PatchParams::apply(MANAGER).force(), &Patch::Apply(&body))
                        .await;
                    if sent.is_ok() {
                        let _ = wrote.send((identity, std::time::Instant::now()));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            anyhow::Ok(result)
        })
    };
    let shutdown = CancellationToken::new();
    let first = contender("first", through_relay, lease("first"), shutdown.clone());
    let got = tokio::time::timeout(DEADLINE, writes.recv()).await?;
    anyhow::ensure!(
        got.map(|(who, _)| who) == Some("first"),
        "the first contender leads and writes"
    );
    let second = contender("second", direct, lease("second"), shutdown.clone());

    cut.send(true)?;
    let mut last_of_first = None;
    let first_of_second = loop {
        match tokio::time::timeout(DEADLINE, writes.recv()).await? {
            Some(("first", at)) => last_of_first = Some(at),
            Some((_, at)) => break at,
            None => anyhow::bail!("the writers ended"),
        }
    };
    let lost = tokio::time::timeout(DEADLINE, first)
        .await
        .context("the first contender never gave up leading")???;
    anyhow::ensure!(
        matches!(lost, Err(ks_shared::leader::LeaderError::Lost { .. })),
        "the first contender gives up leading: {lost:?}"
    );
    while let Ok((who, at)) = writes.try_recv() {
        if who == "first" {
            last_of_first = Some(at);
        }
    }
    let last_of_first =
        last_of_first.with_context(|| format!("the first contender wrote again (it ended with {lost:?})"))?;
    anyhow::ensure!(
        last_of_first < first_of_second,
        "two leaders wrote at once: the first wrote {:?} after the second began",
        last_of_first - first_of_second
    );
    println!(
        "a_leader_that_cannot_renew_stops_writing_first: {:.1} s between the first leader's last write and the second's first",
        (first_of_second - last_of_first).as_secs_f64()
    );
    shutdown.cancel();
    tokio::time::timeout(DEADLINE, second)
        .await???
        .map_err(anyhow::Error::from)?;
    drop(cut);
    ctx.delete_namespace("wds1", &namespace).await
}

/// The stack plays kubelet for our images: a `ks-agent` Deployment with its Secret becomes a
/// local process serving on the Deployment's address (alive; the hub credential here points
/// nowhere), is restarted when it exits, and goes away with the Deployment.
async fn our_image_runs_as_a_local_process(ctx: Ctx) -> anyhow::Result<()> {
    let namespace = ctx.namespace("cluster1").await?;
    let wec = ctx.client("cluster1").await?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(wec.clone(), &namespace);
    apply(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub-credential"},
               "stringData": {"kubeconfig": std::fs::read_to_string(ks_tests::process::unreachable_kubeconfig())?}}),
    )
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(wec.clone(), &namespace);
    apply(
        &deployments,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "status-agent"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                         "containers": [{"name": "agent", "image": "example.io/ks-agent:dev",
                                         "args": [format!("--http-address=127.0.0.1:{port}"),
                                                  "--hub-kubeconfig=/var/run/hub/kubeconfig", "--cluster-name=cluster1"],
                                         "volumeMounts": [{"name": "hub", "mountPath": "/var/run/hub"}]}],
                         "volumes": [{"name": "hub", "secret": {"secretName": "hub-credential"}}]}}}
        }),
    )
    .await?;
    let process = format!("pod-cluster1-{namespace}-status-agent");
    let procs = ctx.stack.procs.clone();
    ks_tests::stack::wait_for("the agent process to serve", DEADLINE, || async {
        Ok(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
    })
    .await?;
    anyhow::ensure!(procs.running(&process).is_some(), "{process} runs");
    let (code, body) = ks_tests::process::http_get(([127, 0, 0, 1], port).into(), "/healthz");
    anyhow::ensure!((code, body.as_str()) == (200, "ok"), "the agent answers /healthz");

    // Like a Pod with restartPolicy Always, the process comes back when it exits.
    let first = procs.running(&process);
    procs.stop(&process, Duration::from_secs(10))?;
    ks_tests::stack::wait_for("the agent process to be restarted", DEADLINE, || async {
        Ok(procs.running(&process).is_some_and(|pid| Some(pid) != first))
    })
    .await?;

    deployments.delete("status-agent", &DeleteParams::default()).await?;
    ks_tests::stack::wait_for("the agent process to stop", DEADLINE, || async {
        Ok(procs.running(&process).is_none())
    })
    .await?;
    ctx.delete_namespace("cluster1", &namespace).await
}

/// What tests use to clear the way take only what they made. The spare WDS's ControlPlane held by
/// a release that is no test's (as `make demo`'s is) is refused, named, and left as it was; CRDs
/// that were there before `install_crd_set` are not among those it says it created, and one
/// replaced since it was created is not removed in its place.
async fn the_stacks_helpers_take_nothing_they_did_not_make(ctx: Ctx) -> anyhow::Result<()> {
    let planes = Api::<DynamicObject>::all_with(ctx.client("kubeflex").await?, &control_planes());
    let held = match planes.get_opt(SPARE_WDS).await? {
        // `make demo`'s, on a stack it ran on.
        Some(theirs)
            if theirs
                .annotations()
                .get("meta.helm.sh/release-namespace")
                .map(String::as_str)
                == Some("kubestellar") =>
        {
            None
        }
        left => {
            if left.is_some() {
                ctx.stack.free_spare_wds().await?;
            }
            let foreign: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "tenancy.kflex.kubestellar.org/v1alpha1", "kind": "ControlPlane",
                "metadata": {"name": SPARE_WDS, "annotations": {
                    "meta.helm.sh/release-name": "someone", "meta.helm.sh/release-namespace": "team-a"}},
                "spec": {"type": "external", "backend": "shared",
                         "bootstrapSecretRef": {"name": "absent", "namespace": "team-a", "inClusterKey": "k"}}}))?;
            Some(planes.create(&PostParams::default(), &foreign).await?)
        }
    };
    let before = planes.get(SPARE_WDS).await?;
    let refused = ctx.stack.free_spare_wds().await;
    let after = planes.get_opt(SPARE_WDS).await?;
    if let Some(made) = held {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: made.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        planes.delete(SPARE_WDS, &params).await?;
        ks_tests::stack::wait_for("the test's ControlPlane to go", DEADLINE, || async {
            Ok(planes.get_opt(SPARE_WDS).await?.is_none())
        })
        .await?;
        ctx.stack.spare_wds_objects_gone().await?;
    }
    let error = refused
        .err()
        .context("free_spare_wds took a ControlPlane a release holds")?;
    anyhow::ensure!(format!("{error}").contains("is held by Helm release"), "{error}");
    anyhow::ensure!(
        after.and_then(|a| a.uid()) == before.uid(),
        "the held ControlPlane changed"
    );

    // Every kubeflex CRD is there since the stack came up: none is the helper's to remove.
    let created = ctx.stack.install_crd_set("kubeflex", "kubeflex").await?;
    anyhow::ensure!(created.is_empty(), "claimed as created: {created:?}");
    // A CRD it did not create (here: by another UID) is left where it is.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(ctx.client("kubeflex").await?);
    let name = "controlplanes.tenancy.kflex.kubestellar.org";
    let uid = crds.get(name).await?.uid().context("a UID")?;
    let replaced = CreatedCrd {
        name: name.to_string(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
    };
    ctx.stack.remove_crds("kubeflex", &[replaced]).await?;
    anyhow::ensure!(
        crds.get(name).await?.uid() == Some(uid),
        "{name} was removed in another's place"
    );
    Ok(())
}
