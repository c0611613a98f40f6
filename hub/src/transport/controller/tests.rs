//! The controller's writes of a Binding's ManifestWorks, against a mocked ITS.

use ks_shared::names::{ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL};
use ks_shared::ocm::{ManagedCluster, ManifestWork};
use ks_shared::runtime::Seen;
use ks_tests::mock::{self, ApiServer};
use kube::runtime::reflector;
use serde_json::Value;

use super::send::*;
use super::state::*;
use super::writes::*;
use super::*;
use crate::transport::ocm::Ocm;
use crate::transport::ocm::cached::CachedWork;
use crate::transport::plan::sharding::DEFAULT_LIMITS;
use crate::transport::types::{Delivery, Origin, SHARED_WITH_LABEL, Unapplied, WorkKey};

/// A transport of the WDS `wds1` whose caches hold `works` and nothing else.
fn with_works(client: &Client, works: &[ManifestWork]) -> Transport<Ocm> {
    let (events, _) = mpsc::unbounded_channel();
    let (cached, mut writer) = reflector::store();
    for work in works {
        let mut cached = CachedWork::of(work);
        cached.metadata.uid.get_or_insert_with(|| uid_of(&work.name_any()));
        writer.apply_watcher_event(&watcher::Event::Apply(cached));
    }
    let filter = Default::default();
    let informers = WorkloadInformers::new(
        client.clone(),
        filter,
        events,
        Default::default(),
        CancellationToken::new(),
    );
    let settings = Settings {
        wds_name: "wds1".into(),
        limits: DEFAULT_LIMITS,
        metrics: Metrics::default(),
    };
    Transport {
        plugin: Arc::new(Ocm),
        packaging: Default::default(),
        wds: client.clone(),
        its: client.clone(),
        informers,
        settings,
        bindings: reflector::store().0,
        policies: reflector::store().0,
        works: cached,
        transforms: reflector::store().0,
        clusters: reflector::store().0,
        customizations: reflector::store().0,
        holding: Default::default(),
        reading_wecs: Default::default(),
        expectations: Default::default(),
        writes: tokio::sync::Semaphore::new(WRITE_CONCURRENCY),
        unsettled: Default::default(),
        events: crate::events::Paced::start(
            mock::client().0,
            "kubestellar.io/test",
            Default::default(),
            &CancellationToken::new(),
        ),
    }
}

/// Binding `b`'s ManifestWork `name` in the mailbox `c1`, holding the ConfigMaps `names`.
fn work(name: &str, names: &[&str]) -> ManifestWork {
    let origin = Origin {
        binding: "b",
        binding_uid: "b-uid",
        binding_generation: 1,
        wds: "wds1",
    };
    let deliveries: Vec<Delivery> = names
        .iter()
        .map(|n| {
            let manifest = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": "ns"}});
            Delivery::new(manifest, "configmaps", false)
        })
        .collect();
    crate::transport::ocm::wrap::wrap(
        &origin,
        "c1",
        name,
        &deliveries.iter().collect::<Vec<_>>(),
        &BTreeSet::new(),
    )
}

fn desired(works: &[ManifestWork]) -> BTreeMap<WorkKey, ManifestWork> {
    let key = |w: &ManifestWork| (w.namespace().unwrap(), w.name_any());
    works.iter().map(|w| (key(w), w.clone())).collect()
}

const WORKS: &str = "/apis/work.open-cluster-management.io/v1/namespaces/c1/manifestworks";

/// The UID of the ManifestWork `name` in the mocked ITS.
fn uid_of(name: &str) -> String {
    format!("uid-{name}")
}

/// Answers one request with `code` (the object itself, with its UID, when it succeeds), then
/// refuses any other.
async fn answer_once(mut server: ApiServer, code: u16, object: &ManifestWork) -> mock::Asked {
    let body = if code < 300 {
        let mut object = object.clone();
        let uid = uid_of(&object.name_any());
        object.metadata.uid.get_or_insert(uid);
        serde_json::to_value(object).unwrap()
    } else {
        mock::failure(code)
    };
    server.answer(code, body).await
}

/// What writing a new ManifestWork does when the ITS answers `code`.
async fn write_answered(code: u16) -> Result<Applied, Error> {
    let (client, server) = mock::client();
    let transport = with_works(&client, &[]);
    let written = work("b.wds1.0", &["a"]);
    let (applied, _) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&written))),
        answer_once(server, code, &written)
    );
    applied
}

#[tokio::test]
async fn an_unchanged_work_is_not_written() {
    let (client, server) = mock::client();
    drop(server);
    let current = work("b.wds1.0", &["a"]);
    let transport = with_works(&client, std::slice::from_ref(&current));
    let applied = transport.apply_works("b", desired(&[current])).await.unwrap();
    assert!(applied.rejections.is_empty() && !applied.holding);
    assert_eq!(transport.settings.metrics.common.writes.get(), 0);
    assert_eq!(transport.settings.metrics.written_bytes.get(), 0);
}

/// The name a write (a creation or a server-side apply) asked for, and the names of the objects
/// it writes into it.
fn written(asked: &mock::Asked) -> (String, Vec<String>) {
    assert!(
        ["POST", "PATCH"].contains(&asked.method.as_str()),
        "{} is not a write",
        asked.method
    );
    let names = asked.body["spec"]["workload"]["manifests"].as_array().unwrap().iter();
    (
        asked.body["metadata"]["name"].as_str().unwrap().to_string(),
        names
            .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
            .collect(),
    )
}

#[tokio::test]
async fn a_new_work_is_created_as_the_transport() {
    let (client, server) = mock::client();
    let transport = with_works(&client, &[]);
    let new = work("b.wds1.0", &["a"]);
    let (applied, asked) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&new))),
        answer_once(server, 201, &new)
    );
    assert!(applied.unwrap().rejections.is_empty());
    assert_eq!(asked.method, "POST");
    assert_eq!(asked.uri, format!("{WORKS}?&fieldManager=transport-controller-wds1"));
    assert_eq!(asked.content_type, "application/json");
    assert_eq!(asked.body, serde_json::to_value(&new).unwrap());
    assert_eq!(asked.accept, METADATA_ONLY, "the whole ManifestWork is not wanted back");
}

#[tokio::test]
async fn a_changed_work_is_applied_server_side_as_the_transport() {
    let (client, server) = mock::client();
    let transport = with_works(&client, &[work("b.wds1.0", &["a"])]);
    let changed = work("b.wds1.0", &["a", "b"]);
    let (applied, asked) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&changed))),
        answer_once(server, 200, &changed)
    );
    assert!(applied.unwrap().rejections.is_empty());
    assert_eq!(asked.method, "PATCH");
    assert_eq!(
        asked.uri,
        format!("{WORKS}/b.wds1.0?&force=true&fieldManager=transport-controller-wds1")
    );
    assert_eq!(asked.content_type, "application/apply-patch+yaml");
    // Over the object the cache shows: the ITS refuses the apply if it is gone or replaced.
    let mut over_its_uid = changed.clone();
    over_its_uid.metadata.uid = Some(uid_of("b.wds1.0"));
    assert_eq!(asked.body, serde_json::to_value(&over_its_uid).unwrap());
    assert_eq!(asked.accept, METADATA_ONLY);
    assert_eq!(written(&asked).1, ["a", "b"]);
    assert_eq!(transport.settings.metrics.common.writes.get(), 1);
    let sent = serde_json::to_vec(&asked.body).unwrap().len() as u64;
    assert_eq!(transport.settings.metrics.written_bytes.get(), sent);
}

#[tokio::test]
async fn a_work_its_wec_has_not_reported_on_is_written_over_once_it_has_or_after_a_while() {
    let (client, server) = mock::client();
    // Generation 2 written, the agent of c1 (available) has reported on 1 only.
    let mut current = work("b.wds1.0", &["a"]);
    current.metadata.generation = Some(2);
    current.status = serde_json::from_value(json!({"conditions": [
        {"type": "Applied", "status": "True", "observedGeneration": 1, "reason": "r", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
    .unwrap();
    let mut transport = with_works(&client, std::slice::from_ref(&current));
    let (clusters, mut writer) = reflector::store();
    let c1: ManagedCluster = serde_json::from_value(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": "c1"}, "spec": {"hubAcceptsClient": true},
        "status": {"conditions": [{"type": "ManagedClusterConditionAvailable", "status": "True", "reason": "r",
                                   "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    .unwrap();
    writer.apply_watcher_event(&watcher::Event::Apply(c1));
    transport.clusters = clusters;
    let changed = work("b.wds1.0", &["a", "b"]);
    // Nothing is asked of the ITS meanwhile (the mocked one answers nothing).
    let waiting = transport
        .apply_works("b", desired(std::slice::from_ref(&changed)))
        .await
        .unwrap();
    assert!(waiting.settling && !waiting.holding);
    assert!(
        transport.holding.names().contains("b"),
        "its status change plans it again"
    );
    assert_eq!(transport.settings.metrics.common.writes.get(), 0);
    // Waited long enough: written.
    let long_ago = Instant::now() - SETTLE_WAIT - Duration::from_secs(1);
    transport
        .unsettled
        .lock()
        .unwrap()
        .insert(("c1".into(), "b.wds1.0".into()), long_ago);
    let (applied, asked) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&changed))),
        answer_once(server, 200, &changed)
    );
    assert!(!applied.unwrap().settling);
    assert_eq!(written(&asked).1, ["a", "b"]);
}

/// What the ITS answers a metadata GET of the ManifestWork `b.wds1.0` labelled `labels`.
fn found(labels: Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"name": "b.wds1.0", "namespace": "c1", "uid": "found", "labels": labels}})
}

#[tokio::test]
async fn a_work_of_ours_created_behind_the_caches_back_is_applied_over_its_uid() {
    let (client, mut server) = mock::client();
    let transport = with_works(&client, &[]);
    let wanted = work("b.wds1.0", &["a"]);
    let answers = async {
        let asked = server.answer(409, mock::failure(409)).await;
        assert_eq!(asked.method, "POST");
        let ours = json!({ORIGIN_BINDING_LABEL: "b", ORIGIN_WDS_LABEL: "wds1", "theirs": "x"});
        let asked = server.answer(200, found(ours)).await;
        assert_eq!((asked.method.as_str(), asked.accept.as_str()), ("GET", METADATA_ONLY));
        assert_eq!(asked.uri, format!("{WORKS}/b.wds1.0"));
        server.answer(200, serde_json::to_value(&wanted).unwrap()).await
    };
    let (applied, asked) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&wanted))),
        answers
    );
    assert!(applied.unwrap().rejections.is_empty());
    assert_eq!(asked.method, "PATCH");
    assert_eq!(asked.content_type, "application/apply-patch+yaml");
    assert_eq!(written(&asked), ("b.wds1.0".to_string(), vec!["a".to_string()]));
    assert_eq!(asked.body["metadata"]["uid"], "found");
}

/// Defect: the hub force-applied over any ManifestWork its create met under its name, and OCM
/// deleted what that one had delivered.
#[tokio::test]
async fn another_work_under_our_name_is_left_alone_and_reported() {
    let others = [
        json!({}),
        json!({ORIGIN_BINDING_LABEL: "b", ORIGIN_WDS_LABEL: "a-wds1"}),
        json!({ORIGIN_BINDING_LABEL: "other", ORIGIN_WDS_LABEL: "wds1"}),
    ];
    for labels in others {
        let (client, mut server) = mock::client();
        let transport = with_works(&client, &[]);
        let wanted = work("b.wds1.0", &["a"]);
        let answers = async move {
            server.answer(409, mock::failure(409)).await;
            server.answer(200, found(labels)).await;
            // Anything more would fail.
        };
        let (applied, ()) = tokio::join!(
            transport.apply_works("b", desired(std::slice::from_ref(&wanted))),
            answers
        );
        assert_eq!(
            applied.unwrap().rejections,
            [
                "name conflict: ManifestWork c1/b.wds1.0 exists without this Binding's labels \
              transport.kubestellar.io/originOwnerReferenceBindingKey=b and transport.kubestellar.io/originWdsName=wds1: \
              it is left alone, and what it would hold does not reach c1"
            ]
        );
        assert_eq!(transport.expectations().unseen(Instant::now()).count(), 0);
    }
}

#[tokio::test]
async fn a_work_gone_between_the_create_and_the_look_is_created_on_the_next_try() {
    let (client, mut server) = mock::client();
    let transport = with_works(&client, &[]);
    let wanted = work("b.wds1.0", &["a"]);
    let answers = async {
        server.answer(409, mock::failure(409)).await;
        server.answer(404, mock::failure(404)).await;
    };
    let (applied, ()) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&wanted))),
        answers
    );
    let Err(Error::Api(kube::Error::Api(status))) = applied else {
        panic!("not retried: {:?}", applied.map(|a| a.rejections));
    };
    assert_eq!(status.code, 409);
}

#[tokio::test]
async fn a_stale_work_is_deleted_and_one_already_gone_is_no_error() {
    let kept = work("b.wds1.0", &["a"]);
    let stale = work("b.wds1.1", &["b"]);
    for code in [200, 404] {
        let (client, server) = mock::client();
        let transport = with_works(&client, &[kept.clone(), stale.clone()]);
        let (applied, asked) = tokio::join!(
            transport.apply_works("b", desired(std::slice::from_ref(&kept))),
            answer_once(server, code, &stale)
        );
        assert!(applied.unwrap().rejections.is_empty(), "{code}");
        assert_eq!(asked.method, "DELETE");
        assert_eq!(asked.accept, METADATA_ONLY);
        // Only the object the cache shows: not one created under its name since.
        assert_eq!(asked.body["preconditions"]["uid"], "uid-b.wds1.1");
        assert_eq!(
            asked.uri.split_once('?').map_or(asked.uri.as_str(), |(p, _)| p),
            format!("{WORKS}/b.wds1.1")
        );
    }
}

/// Defect: a Binding's ManifestWorks being deleted (OCM's finalizer holds each while its agent
/// removes what it applied, about 7 objects a second) were deleted again on every pass until
/// they were gone, and each status change the agent wrote meanwhile brought a pass.
#[tokio::test]
async fn a_work_being_deleted_is_not_deleted_again() {
    let (client, server) = mock::client();
    drop(server);
    let mut deleting = work("b.wds1.0", &["a"]);
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    deleting.metadata.finalizers = Some(vec!["cluster.open-cluster-management.io/manifest-work-cleanup".into()]);
    let transport = with_works(&client, &[deleting]);
    // The ITS answers nothing: a delete would fail.
    let applied = transport.apply_works("b", BTreeMap::new()).await.unwrap();
    assert!(applied.rejections.is_empty() && !applied.holding);
    assert_eq!(transport.settings.metrics.common.writes.get(), 0);
}

/// `work` at resourceVersion `version`.
fn at(mut work: ManifestWork, version: &str) -> ManifestWork {
    work.metadata.resource_version = Some(version.into());
    work
}

/// The names of the ManifestWorks of Binding `b` that a plan starts from, with the names of the
/// objects each holds.
fn planned_from(transport: &Transport<Ocm>) -> Vec<(String, Vec<String>)> {
    let mut works: Vec<_> = transport
        .current_works("b")
        .iter()
        .map(|w| (w.name_any(), Ocm.held(w).iter().map(|h| h.identity.3.clone()).collect()))
        .collect();
    works.sort();
    works
}

#[tokio::test]
async fn a_binding_planned_again_before_the_watch_shows_its_write_does_not_write_it_again() {
    let (client, server) = mock::client();
    let before = at(work("b.wds1.0", &["a"]), "5");
    let transport = with_works(&client, std::slice::from_ref(&before));
    let written = work("b.wds1.0", &["a", "b"]);
    let reply = at(written.clone(), "7");
    let (applied, _) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&written))),
        answer_once(server, 200, &reply)
    );
    assert!(applied.unwrap().rejections.is_empty());
    assert_eq!(
        planned_from(&transport),
        [("b.wds1.0".into(), vec!["a".into(), "b".into()])]
    );
    // Its UID from the reply: a delete of it before the watch shows it names that object.
    let written_uid = transport.current_works("b")[0].uid();
    assert_eq!(written_uid.as_deref(), Some("uid-b.wds1.0"));
    // The ITS answers nothing more: another write would fail.
    let again = transport
        .apply_works("b", desired(std::slice::from_ref(&written)))
        .await;
    assert!(again.unwrap().rejections.is_empty());
    assert_eq!(transport.settings.metrics.common.writes.get(), 1);
    let mut revisions = Revisions::default();
    let older = seen_work(
        &transport.expectations,
        &mut revisions,
        Seen::Changed(&CachedWork::of(&at(work("b.wds1.0", &["a"]), "6"))),
    );
    assert!(matches!(older, Some(Input::Binding(b)) if b == "b"));
    assert_eq!(
        planned_from(&transport)[0].1.len(),
        2,
        "an older version is not the write"
    );
    let confirmed = seen_work(
        &transport.expectations,
        &mut revisions,
        Seen::Changed(&CachedWork::of(&at(written.clone(), "7"))),
    );
    assert!(
        confirmed.is_none(),
        "what it was planned from: no reason to plan it again"
    );
    let status = seen_work(
        &transport.expectations,
        &mut revisions,
        Seen::Changed(&CachedWork::of(&at(written, "8"))),
    );
    assert!(
        matches!(status, Some(Input::Binding(b)) if b == "b"),
        "a change after it is (without a generation, a status change cannot be told apart)"
    );
    assert_eq!(transport.expectations().unseen(Instant::now()).count(), 0);
}

#[tokio::test]
async fn a_binding_planned_again_before_the_watch_shows_its_deletion_does_not_delete_again() {
    let kept = work("b.wds1.0", &["a"]);
    let stale = at(work("b.wds1.1", &["b"]), "5");
    let (client, server) = mock::client();
    let transport = with_works(&client, &[kept.clone(), stale.clone()]);
    let (applied, _) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&kept))),
        answer_once(server, 200, &stale)
    );
    assert!(applied.unwrap().rejections.is_empty());
    assert_eq!(planned_from(&transport), [("b.wds1.0".into(), vec!["a".into()])]);
    let again = transport.apply_works("b", desired(std::slice::from_ref(&kept))).await;
    assert!(again.unwrap().rejections.is_empty());
    assert_eq!(transport.settings.metrics.common.writes.get(), 1);
    seen_work(
        &transport.expectations,
        &mut Revisions::default(),
        Seen::Deleted(&CachedWork::of(&stale)),
    );
    assert_eq!(transport.expectations().unseen(Instant::now()).count(), 0);
}

#[tokio::test]
async fn failed_writes_and_deletes_are_errors_to_retry() {
    let Err(Error::Api(kube::Error::Api(status))) = write_answered(500).await else {
        panic!("a write answered 500 is not retried");
    };
    assert_eq!(status.code, 500);
    let stale = work("b.wds1.1", &["b"]);
    for code in [409, 500] {
        let (client, server) = mock::client();
        let transport = with_works(&client, std::slice::from_ref(&stale));
        let (applied, asked) = tokio::join!(
            transport.apply_works("b", BTreeMap::new()),
            answer_once(server, code, &stale)
        );
        assert_eq!(asked.method, "DELETE");
        assert_eq!(asked.accept, METADATA_ONLY);
        assert!(
            matches!(applied, Err(Error::Api(_))),
            "a delete answered {code} is retried"
        );
    }
}

/// The ITS refuses a write naming the UID of an object that was replaced meanwhile: the cache
/// was behind, and the next pass plans from one that shows the new object.
#[tokio::test]
async fn a_work_replaced_since_the_cache_showed_it_is_planned_again() {
    let (client, mut server) = mock::client();
    let transport = with_works(&client, &[work("b.wds1.0", &["a"])]);
    let changed = work("b.wds1.0", &["a", "b"]);
    let mut refused = mock::failure(422);
    refused["details"] = json!({"causes": [{"reason": "FieldValueInvalid", "field": "metadata.uid",
                                            "message": "field is immutable"}]});
    let (applied, asked) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&changed))),
        server.answer(422, refused)
    );
    assert_eq!(asked.method, "PATCH");
    let Err(Error::Api(kube::Error::Api(status))) = applied else {
        panic!("not retried: {:?}", applied.map(|a| a.rejections));
    };
    assert_eq!(status.code, 422);
}

#[tokio::test]
async fn a_refused_write_or_an_unaccepted_wecs_missing_mailbox_is_reported_not_retried() {
    let refused = write_answered(422).await.unwrap();
    assert_eq!(
        refused.rejections,
        ["the ITS rejected ManifestWork c1/b.wds1.0: mocked 422"]
    );
    assert!(!refused.passing, "only a change can help");
    // No accepted ManagedCluster c1: its acceptance will bring the Binding back.
    let missing = write_answered(404).await.unwrap();
    assert_eq!(
        missing.rejections,
        ["the mailbox namespace c1 does not exist (is the WEC accepted into the ITS?): mocked 404"]
    );
    assert!(!missing.passing);
}

#[tokio::test]
async fn an_accepted_wecs_missing_mailbox_is_reported_and_retried() {
    let (client, server) = mock::client();
    let mut transport = with_works(&client, &[]);
    let (store, mut writer) = reflector::store();
    let mut accepted = ManagedCluster::new("c1", Default::default());
    accepted.spec.hub_accepts_client = true;
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(accepted));
    transport.clusters = store;
    let written = work("b.wds1.0", &["a"]);
    let (applied, _) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&written))),
        answer_once(server, 404, &written)
    );
    let applied = applied.unwrap();
    assert_eq!(applied.rejections.len(), 1);
    assert!(
        applied.passing,
        "OCM makes an accepted WEC's mailbox again, and nothing the hub watches changes"
    );
}

#[tokio::test]
async fn a_mailbox_being_deleted_is_reported_and_retried() {
    let (client, mut server) = mock::client();
    let transport = with_works(&client, &[]);
    let written = work("b.wds1.0", &["a"]);
    // The NamespaceLifecycle admission's answer.
    let terminating = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "manifestworks.work.open-cluster-management.io \"b.wds1.0\" is forbidden: unable to create new content in namespace c1 because it is being terminated",
        "reason": "Forbidden", "code": 403,
        "details": {"name": "b.wds1.0", "kind": "manifestworks",
                    "causes": [{"reason": "NamespaceTerminating", "message": "namespace c1 is being terminated", "field": "metadata.namespace"}]}});
    let (applied, _) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&written))),
        server.answer(403, terminating)
    );
    let applied = applied.unwrap();
    assert!(applied.passing);
    let [rejection] = &applied.rejections[..] else {
        panic!("{:?}", applied.rejections);
    };
    assert!(
        rejection.starts_with("the mailbox namespace c1 is being deleted; trying again: "),
        "{rejection}"
    );
}

#[tokio::test]
async fn a_work_losing_an_object_to_a_new_one_waits_until_that_one_is_applied() {
    let (client, server) = mock::client();
    let transport = with_works(&client, &[work("b.wds1.0", &["a", "b"])]);
    let new = work("b.wds1.1", &["b"]);
    let wanted = desired(&[work("b.wds1.0", &["a"]), new.clone()]);
    let (applied, asked) = tokio::join!(transport.apply_works("b", wanted), answer_once(server, 201, &new));
    // Only the new one is written; the server is gone, so any other request would fail.
    assert!(applied.unwrap().holding);
    assert_eq!(written(&asked).0, "b.wds1.1");
    assert!(transport.holding.names().contains("b"));
}

/// `b.wds1.0` holds a and b, applied; the Binding is planned as `wanted`, whose two writes are
/// answered. Whether it holds objects back, what each write holds, and the UID each names.
async fn moving(wanted: &[ManifestWork]) -> (bool, BTreeMap<String, Vec<String>>, BTreeMap<String, Value>) {
    let (client, mut server) = mock::client();
    let mut applied_before = work("b.wds1.0", &["a", "b"]);
    applied_before.metadata.generation = Some(1);
    applied_before.status = serde_json::from_value(json!({"conditions": [
        {"type": "Applied", "status": "True", "observedGeneration": 1, "reason": "r", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
    .unwrap();
    let transport = with_works(&client, &[applied_before]);
    let answers = async {
        let (mut all, mut uids) = (BTreeMap::new(), BTreeMap::new());
        let some_work = serde_json::to_value(work("any", &[])).unwrap();
        for _ in 0..2 {
            let asked = server.answer(200, some_work.clone()).await;
            let (name, names) = written(&asked);
            uids.insert(name.clone(), asked.body["metadata"]["uid"].clone());
            all.insert(name, names);
        }
        (all, uids)
    };
    let (applied, (written, uids)) = tokio::join!(transport.apply_works("b", desired(wanted)), answers);
    (applied.unwrap().holding, written, uids)
}

#[tokio::test]
async fn a_work_losing_an_object_still_gains_its_new_ones_and_keeps_the_one_it_loses() {
    // d is new in w-0; b moves to the new w-1, which no agent has applied.
    let (holding, written, _) = moving(&[work("b.wds1.0", &["a", "d"]), work("b.wds1.1", &["b"])]).await;
    assert!(holding);
    // w-0 gets d now and keeps b until w-1 is applied; w-1 is written as it should be.
    assert_eq!(written["b.wds1.0"], ["a", "d", "b"]);
    assert_eq!(written["b.wds1.1"], ["b"]);
}

#[tokio::test]
async fn a_work_going_while_an_object_moves_holds_that_object_alone() {
    // a is deselected and w-0 goes; b moves to the new w-1, which no agent has applied.
    let (holding, written, uids) = moving(&[work("b.wds1.1", &["b"])]).await;
    assert!(holding);
    // w-0 keeps b until w-1 is applied, and nothing else: a goes from the WEC now.
    assert_eq!(written["b.wds1.0"], ["b"]);
    assert_eq!(written["b.wds1.1"], ["b"]);
    // Over the UID the cache shows: one deleted meanwhile is refused, never made again.
    assert_eq!(uids["b.wds1.0"], uid_of("b.wds1.0"));
}

#[tokio::test]
async fn the_binding_status_is_applied_and_a_binding_gone_meanwhile_is_done() {
    let mut binding = Binding::new("b", Default::default());
    binding.metadata.generation = Some(2);
    binding.metadata.finalizers = Some(vec![TRANSPORT_FINALIZER.into()]);
    for code in [200, 404, 500] {
        let (client, mut server) = mock::client();
        let mut transport = with_works(&client, &[]);
        let (bindings, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(binding.clone()));
        transport.bindings = bindings;
        let answer = if code < 300 {
            serde_json::to_value(&binding).unwrap()
        } else {
            mock::failure(code)
        };
        let (reconciled, asked) = tokio::join!(transport.reconcile("b"), server.answer(code, answer));
        assert_eq!(asked.method, "PATCH");
        let path =
            "/apis/control.kubestellar.io/v1alpha1/bindings/b/status?&force=true&fieldManager=transport-controller";
        assert_eq!(asked.uri, path);
        assert_eq!(asked.content_type, "application/apply-patch+yaml");
        assert_eq!(
            asked.body,
            json!({"apiVersion": "control.kubestellar.io/v1alpha1", "kind": "Binding",
                   "status": {"observedGeneration": 2, "errors": []}})
        );
        assert_eq!(reconciled.is_ok(), code != 500, "{code}");
    }
}

#[tokio::test]
async fn a_wec_change_plans_again_only_its_bindings_that_read_their_wecs() {
    let (client, _) = mock::client();
    let mut transport = with_works(&client, &[]);
    let (bindings, mut writer) = reflector::store();
    for (name, wecs) in [("b1", ["c1", "c2"]), ("b2", ["c1", "c2"]), ("b3", ["c2", "c3"])] {
        let mut binding = Binding::new(name, Default::default());
        binding.spec.destinations = wecs
            .iter()
            .map(|w| ks_shared::api::Destination {
                cluster_id: w.to_string(),
            })
            .collect();
        writer.apply_watcher_event(&watcher::Event::Apply(binding));
    }
    transport.bindings = bindings;
    // b1 has templates (or errors); b2 does not; b3 does, and a gone Binding did.
    for name in ["b1", "b3", "gone"] {
        transport.reading_wecs.set(name, true);
    }
    assert_eq!(transport.depending_on("c1"), ["b1"]);
    assert_eq!(transport.depending_on("c2"), ["b1", "b3"]);
    assert!(transport.depending_on("c4").is_empty());
    transport.reading_wecs.set("b1", false);
    assert!(transport.depending_on("c1").is_empty());
}

#[test]
fn a_status_change_of_a_work_only_reports_and_any_other_change_plans_again() {
    let expectations = std::sync::Mutex::default();
    let mut revisions = Revisions::default();
    let mut seen = |work: &ManifestWork, deleted: bool| {
        let cached = CachedWork::of(work);
        let seen = if deleted {
            Seen::Deleted(&cached)
        } else {
            Seen::Changed(&cached)
        };
        match seen_work(&expectations, &mut revisions, seen) {
            Some(Input::Binding(b)) => format!("plan {b}"),
            Some(Input::Reported(b)) => format!("report {b}"),
            _ => "nothing".to_string(),
        }
    };
    let mut work = at(work("b.wds1.0", &["a"]), "5");
    work.metadata.generation = Some(1);
    assert_eq!(seen(&work, false), "plan b", "first sight");
    // OCM's agent writes its status: a new resourceVersion, the same generation.
    assert_eq!(seen(&at(work.clone(), "6"), false), "report b");
    let mut edited = at(work.clone(), "7");
    edited
        .metadata
        .labels
        .get_or_insert_default()
        .insert(ORIGIN_WDS_LABEL.into(), "another".into());
    assert_eq!(seen(&edited, false), "plan b", "a label edited by hand");
    work.metadata.generation = Some(2);
    assert_eq!(seen(&at(work.clone(), "8"), false), "plan b", "a new spec");
    assert_eq!(seen(&at(work.clone(), "9"), false), "report b");
    assert_eq!(seen(&at(work.clone(), "10"), true), "plan b", "deleted");
}

#[test]
fn a_policy_seen_new_replaced_or_leaving_plans_its_binding_and_its_status_only_reports() {
    let mut revisions = Revisions::default();
    let mut seen = |policy: &BindingPolicy, deleted: bool| {
        let seen = if deleted {
            Seen::Deleted(policy)
        } else {
            Seen::Changed(policy)
        };
        match seen_policy(&mut revisions, seen) {
            Some(Input::Binding(b)) => format!("plan {b}"),
            Some(Input::Reported(b)) => format!("report {b}"),
            _ => "nothing".to_string(),
        }
    };
    let mut policy: BindingPolicy = serde_json::from_value(json!({
        "apiVersion": "control.kubestellar.io/v1alpha1", "kind": "BindingPolicy",
        "metadata": {"name": "b", "uid": "p1", "generation": 1}, "spec": {}
    }))
    .unwrap();
    // Its Binding may have been seen first, and left alone while the policy was not known.
    assert_eq!(seen(&policy, false), "plan b", "first sight");
    policy.status = Some(Default::default());
    assert_eq!(seen(&policy, false), "report b", "its status written");
    policy.metadata.uid = Some("p2".into());
    assert_eq!(seen(&policy, false), "plan b", "replaced by one of the same name");
    policy.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    assert_eq!(seen(&policy, false), "plan b", "leaving");
    assert_eq!(seen(&policy, true), "plan b", "gone");
}

#[test]
fn only_both_origin_labels_make_a_work_ours() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let ours = labels(&[(ORIGIN_BINDING_LABEL, "x-a"), (ORIGIN_WDS_LABEL, "b"), ("theirs", "y")]);
    assert!(of_origin(&ours, "x-a", "b"));
    assert!(!of_origin(&ours, "x", "a-b"), "names that nest");
    assert!(!of_origin(&labels(&[(ORIGIN_BINDING_LABEL, "x-a")]), "x-a", "b"));
    assert!(!of_origin(&labels(&[(ORIGIN_WDS_LABEL, "b")]), "x-a", "b"));
    assert!(!of_origin(&BTreeMap::new(), "x-a", "b"));
}

/// Binding `binding`'s ManifestWork `name` in `c1` holding the ConfigMaps `names`, with the
/// sharers label `sharing` names.
fn work_of(binding: &str, name: &str, names: &[&str], sharing: &[&str]) -> ManifestWork {
    let mut work = work(name, names);
    let labels = work.labels_mut();
    labels.insert(ORIGIN_BINDING_LABEL.into(), binding.into());
    labels.insert(
        SHARED_WITH_LABEL.into(),
        sharers::label(&sharing.iter().copied().collect()),
    );
    work
}

#[tokio::test]
async fn a_work_is_labelled_with_those_sharing_its_objects_and_again_when_one_goes() {
    let other = work_of("o", "o.wds1.0", &["a"], &["b.wds1.0"]);
    let ours = work("b.wds1.0", &["a", "b"]);
    // Another Binding's ManifestWork holds a too: ours is written labelled with it.
    let (client, server) = mock::client();
    let transport = with_works(&client, &[other.clone(), ours.clone()]);
    let labelled = work_of("b", "b.wds1.0", &["a", "b"], &["o.wds1.0"]);
    let (applied, asked) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&ours))),
        answer_once(server, 200, &labelled)
    );
    assert!(applied.unwrap().rejections.is_empty());
    assert_eq!(asked.body["metadata"]["labels"], json!(labelled.labels()));
    // Labelled so already: nothing to write.
    let (client, server) = mock::client();
    drop(server);
    let transport = with_works(&client, &[other, labelled.clone()]);
    transport
        .apply_works("b", desired(std::slice::from_ref(&ours)))
        .await
        .unwrap();
    assert_eq!(transport.settings.metrics.common.writes.get(), 0);
    // The other is gone: ours is written with the label empty (not left out: the value its
    // create set would stay), so OCM's agent applies it again.
    let (client, server) = mock::client();
    let transport = with_works(&client, std::slice::from_ref(&labelled));
    let alone = work_of("b", "b.wds1.0", &["a", "b"], &[]);
    let (applied, asked) = tokio::join!(
        transport.apply_works("b", desired(std::slice::from_ref(&ours))),
        answer_once(server, 200, &alone)
    );
    assert!(applied.unwrap().rejections.is_empty());
    assert_eq!(asked.body["metadata"]["labels"], json!(alone.labels()));
    assert_eq!(asked.body["metadata"]["labels"][SHARED_WITH_LABEL], "");
    // One written before there was a label shares nothing: no reason to write.
    let (client, server) = mock::client();
    drop(server);
    let transport = with_works(&client, std::slice::from_ref(&ours));
    transport
        .apply_works("b", desired(std::slice::from_ref(&ours)))
        .await
        .unwrap();
    assert_eq!(transport.settings.metrics.common.writes.get(), 0);
}

#[tokio::test]
async fn an_object_dropped_but_still_applied_by_the_wec_is_shared_until_it_is_let_go() {
    // o.wds1.0 no longer holds a, but its WEC has not applied that version: a is still there for it.
    let mut other = work_of("o", "o.wds1.0", &["c"], &[]);
    other.metadata.generation = Some(2);
    other.status = serde_json::from_value(json!({"resourceStatus": {"manifests": [
        {"resourceMeta": {"group": "", "kind": "ConfigMap", "namespace": "ns", "name": "a",
                          "version": "v1", "resource": "configmaps", "ordinal": 0},
         "conditions": [{"type": "Applied", "status": "True", "reason": "r", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}}))
    .unwrap();
    let labelled = work_of("b", "b.wds1.0", &["a"], &["o.wds1.0"]);
    let (client, server) = mock::client();
    drop(server);
    let transport = with_works(&client, &[other, labelled]);
    transport
        .apply_works("b", desired(&[work("b.wds1.0", &["a"])]))
        .await
        .unwrap();
    assert_eq!(transport.settings.metrics.common.writes.get(), 0);
}

#[tokio::test]
async fn the_bindings_to_plan_again_are_those_sharing_or_labelled_in_the_mailbox() {
    let (client, _server) = mock::client();
    let transport = with_works(
        &client,
        &[
            work_of("b", "b.wds1.0", &["a"], &[]),
            work_of("o", "o.wds1.0", &["a", "c"], &[]),
            work_of("x", "x.wds1.0", &["d"], &["gone.wds1.0"]),
            work_of("y", "y.wds1.0", &["e"], &[]),
        ],
    );
    let mailboxes = BTreeSet::from(["c1".to_string()]);
    assert_eq!(
        transport.sharing(&mailboxes),
        BTreeSet::from(["b", "o", "x"].map(String::from))
    );
    assert!(transport.sharing(&BTreeSet::from(["c2".to_string()])).is_empty());
}

#[test]
fn what_a_wec_could_not_apply_is_told_once_per_work_and_again_when_it_fails_anew() {
    let failing = |message: &str| {
        let mut work = CachedWork::of(&work("b.wds1.0", &["a"]));
        work.unapplied = Box::new([Unapplied {
            group: String::new(),
            resource: "configmaps".into(),
            namespace: "ns".into(),
            name: "a".into(),
            message: message.into(),
        }]);
        work
    };
    let mut told = HashMap::new();
    let first = failing("namespaces \"ns\" not found");
    let tell =
        |told: &mut HashMap<_, _>, w: &CachedWork| match newly_unapplied(told, &Seen::Changed(w), |w: &CachedWork| {
            &w.unapplied
        }) {
            Some(Input::Unapplied(mailbox, objects)) => Some((mailbox, objects.len())),
            _ => None,
        };
    assert_eq!(tell(&mut told, &first), Some(("c1".into(), 1)));
    assert_eq!(tell(&mut told, &first), None, "told once");
    assert_eq!(tell(&mut told, &failing("another reason")), Some(("c1".into(), 1)));
    let applied = CachedWork::of(&work("b.wds1.0", &["a"]));
    assert_eq!(tell(&mut told, &applied), None);
    assert_eq!(
        tell(&mut told, &first),
        Some(("c1".into(), 1)),
        "failing again after it applied"
    );
}
