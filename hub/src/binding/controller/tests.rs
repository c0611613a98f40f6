//! Tests of the binding controller's loop against a mocked apiserver.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use ks_shared::api::{BindingPolicySpec, DownsyncObjectTest, DownsyncPolicyClause};
use serde_json::{Value as Json, json};

use super::*;
use crate::binding::state;
use crate::informers::{GroupResource, ResourceFilter};
use ks_shared::runtime::RETRY_MAX;
use ks_tests::mock::{self, ApiServer};
use kube::runtime::reflector;

fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let (store, mut writer) = reflector::store();
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(object));
    }
    store
}

/// A policy sending every ConfigMap named `a` to every WEC, with our finalizer.
fn policy(singleton: bool) -> BindingPolicy {
    let mut clause = DownsyncPolicyClause {
        test: DownsyncObjectTest {
            object_names: vec!["a".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    clause.modulation.want_singleton_reported_state = singleton;
    let spec = BindingPolicySpec {
        cluster_selectors: vec![Default::default()],
        downsync: vec![clause],
    };
    let mut policy = BindingPolicy::new("p", spec);
    policy.metadata.uid = Some("uid-p".into());
    policy.metadata.generation = Some(1);
    policy.metadata.resource_version = Some("5".into());
    policy.metadata.finalizers = Some(vec![BINDING_POLICY_FINALIZER.into()]);
    policy
}

fn config_map() -> WorkloadObject {
    state::tests::object("a", &[])
}

fn test_loop<'a>(client: &Client, policies: Vec<BindingPolicy>, resolutions: &'a mut Resolutions) -> Loop<'a> {
    let (events, _) = mpsc::unbounded_channel();
    let caches = Caches {
        informers: WorkloadInformers::new(
            client.clone(),
            ResourceFilter::default(),
            events,
            Default::default(),
            CancellationToken::new(),
        ),
        policies: store(policies),
        bindings: store(vec![]),
        namespaces: store(vec![]),
        clusters: store(vec![]),
        collectors: store(vec![]),
    };
    Loop {
        caches,
        wds: client.clone(),
        labelled: Default::default(),
        retries: Backoff::for_writes(),
        gathering: Debounce::new(Duration::from_millis(50), Duration::from_secs(2)),
        resolutions,
        policy_api: Api::all(client.clone()),
        binding_api: Api::all(client.clone()),
        metrics: Metrics::default(),
        events: unheard_events(),
    }
}

/// Events published to nowhere: these tests follow the controller's writes, not its Events.
fn unheard_events() -> crate::events::Events {
    let (client, server) = mock::client();
    drop(server);
    crate::events::Events::new(client, "kubestellar.io/test")
}

/// Whether `retry`, and only it, waits for a retry.
fn only_waiting(looper: &Loop<'_>, retry: &Retry) -> bool {
    looper.retries.is_waiting(retry) && looper.retries.waiting() == 1
}

fn stored(object: &impl serde::Serialize) -> Json {
    serde_json::to_value(object).unwrap()
}

/// Answers a flush of policy `p` selecting nothing: the Binding is created, then the status
/// write gets `status_code`.
async fn answer_binding_then_status(server: &mut ApiServer, status_code: u16) -> mock::Asked {
    let created = server.answer(201, stored(&Binding::new("p", Default::default()))).await;
    assert_eq!(created.method, "POST");
    assert!(
        created
            .uri
            .starts_with("/apis/control.kubestellar.io/v1alpha1/bindings?")
    );
    let body = if status_code < 300 {
        stored(&policy(false))
    } else {
        mock::failure(status_code)
    };
    server.answer(status_code, body).await
}

#[tokio::test]
async fn a_failed_finalizer_removal_is_retried() {
    let mut deleting = policy(false);
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let mut looper = test_loop(&client, vec![deleting], &mut resolutions);
    let ((), asked) = tokio::join!(looper.policy_changed("p"), server.answer(500, mock::failure(500)));
    assert_eq!(asked.body["metadata"]["finalizers"], json!([]));
    assert!(only_waiting(&looper, &Retry::Policy("p".into())));

    let ((), again) = tokio::join!(
        looper.retry(Instant::now() + RETRY_MAX),
        server.answer(200, stored(&policy(false)))
    );
    assert_eq!((again.method.as_str(), &again.body), ("PATCH", &asked.body));
    assert_eq!(looper.retries.waiting(), 0);
}

#[tokio::test]
async fn a_policy_taking_over_is_written_before_the_deleted_one_lets_go() {
    let mut deleting = policy(false);
    deleting.metadata.name = Some("old".into());
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let object = config_map();
    resolutions.set_policy("p", 1, &policy(false).spec, [(&object, None)], &[]);
    let mut looper = test_loop(&client, vec![policy(false), deleting], &mut resolutions);
    // The other policy's change waits for its burst to end, but not past the deletion.
    looper.gather(Instant::now());
    assert_eq!(looper.gathering.len(), 1);
    // The other policy's Binding is created and its status written, then the finalizer goes.
    let ((), (status, finalizer)) = tokio::join!(looper.policy_changed("old"), async {
        let status = answer_binding_then_status(&mut server, 200).await;
        (status, server.answer(200, stored(&policy(false))).await)
    });
    assert!(
        status
            .uri
            .starts_with("/apis/control.kubestellar.io/v1alpha1/bindingpolicies/p/status")
    );
    assert!(
        finalizer
            .uri
            .starts_with("/apis/control.kubestellar.io/v1alpha1/bindingpolicies/old?"),
        "{}",
        finalizer.uri
    );
    assert_eq!(finalizer.body["metadata"]["finalizers"], json!([]));
}

#[tokio::test]
async fn objects_joining_one_after_another_set_the_pace_other_changes_do_not() {
    let (client, _server) = mock::client();
    let mut resolutions = Resolutions::default();
    resolutions.set_policy("p", 1, &policy(false).spec, [], &[]);
    let mut looper = test_loop(&client, vec![policy(false)], &mut resolutions);
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    looper.gather(t0);
    looper.gathering.take_all(Instant::now());
    let a = config_map();
    let key = a.identity.workload_ref();
    // `a` joins, leaves and joins again, 120 ms apart: a stream of arrivals (not a fast one)
    // whose pause is 4 x 120 ms, at most 200 ms.
    for (n, present) in [true, false, true].into_iter().enumerate() {
        looper.resolutions.set_object(&key, present.then_some((&a, None)));
        looper.gather(t0 + ms(120 * n as u64));
    }
    assert_eq!(looper.gathering.next_due(), Some(t0 + ms(240 + 200)));
    looper.gathering.take_all(Instant::now());
    // `a` changes twice, 60 ms apart, long after: each waits the base pause.
    let mut newer = a.clone();
    for (n, version) in ["2", "3"].into_iter().enumerate() {
        newer.resource_version = version.into();
        looper.resolutions.set_object(&key, Some((&newer, None)));
        looper.gather(t0 + ms(4000 + 60 * n as u64));
    }
    assert_eq!(looper.gathering.next_due(), Some(t0 + ms(4060 + 50)));
}

#[tokio::test]
async fn a_finalizer_removal_on_a_policy_gone_is_not_retried() {
    let mut deleting = policy(false);
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let mut looper = test_loop(&client, vec![deleting], &mut resolutions);
    tokio::join!(looper.policy_changed("p"), server.answer(404, mock::failure(404)));
    assert_eq!(looper.retries.waiting(), 0);
    assert_eq!(looper.metrics.errors.get(), 0);
}

#[tokio::test]
async fn a_failed_policy_status_write_is_retried() {
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let mut looper = test_loop(&client, vec![policy(false)], &mut resolutions);
    looper.policy_changed("p").await;
    let ((), status) = tokio::join!(looper.flush_all(), answer_binding_then_status(&mut server, 503));
    assert!(
        status
            .uri
            .starts_with("/apis/control.kubestellar.io/v1alpha1/bindingpolicies/p/status")
    );
    assert!(only_waiting(&looper, &Retry::Policy("p".into())));

    // The retry re-checks the policy; the Binding cache still lacks it, so it is written
    // again (a conflict the Binding's event would settle), then the status.
    looper.retry(Instant::now() + RETRY_MAX).await;
    assert_eq!(looper.retries.waiting(), 0);
    let ((), status) = tokio::join!(looper.flush_all(), answer_binding_then_status(&mut server, 200));
    assert_eq!(status.body["status"]["conditions"][0]["type"], "Synced");
    assert_eq!(looper.retries.waiting(), 0);
}

#[tokio::test]
async fn a_refused_policy_status_write_is_reported_not_retried() {
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let mut looper = test_loop(&client, vec![policy(false)], &mut resolutions);
    looper.policy_changed("p").await;
    tokio::join!(looper.flush_all(), answer_binding_then_status(&mut server, 422));
    assert_eq!(looper.retries.waiting(), 0);
    assert_eq!(looper.metrics.errors.get(), 1);
}

#[tokio::test]
async fn a_binding_too_large_to_store_is_reported_not_written() {
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    // 5,000 ConfigMaps with the longest names: 1.77 MB of Binding.
    let objects: Vec<WorkloadObject> = (0..5000)
        .map(|i| state::tests::object(&format!("{i:0>253}"), &[]))
        .collect();
    let mut everything = policy(false);
    everything.spec.downsync[0].test = DownsyncObjectTest::default();
    resolutions.set_policy("p", 1, &everything.spec, objects.iter().map(|o| (o, None)), &[]);
    let mut looper = test_loop(&client, vec![everything], &mut resolutions);
    // The status is the first and only write.
    let ((), status) = tokio::join!(looper.flush_all(), server.answer(200, stored(&policy(false))));
    assert!(
        status
            .uri
            .starts_with("/apis/control.kubestellar.io/v1alpha1/bindingpolicies/p/status")
    );
    let synced = &status.body["status"]["conditions"][0];
    assert_eq!(synced["status"], "False");
    let message = synced["message"].as_str().unwrap();
    assert!(message.starts_with("the Binding would take 1.77 MB"), "{message}");
    assert_eq!(looper.retries.waiting(), 0);
}

#[tokio::test]
async fn a_binding_the_policy_does_not_own_is_reported_not_taken_over() {
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let object = config_map();
    resolutions.set_policy("p", 1, &policy(false).spec, [(&object, None)], &[]);
    let mut looper = test_loop(&client, vec![policy(false)], &mut resolutions);
    // Written by hand: no controller owner.
    let mut by_hand = Binding::new("p", Default::default());
    by_hand.metadata.resource_version = Some("3".into());
    looper.caches.bindings = store(vec![by_hand]);
    // The status is the first and only write.
    let ((), status) = tokio::join!(looper.flush_all(), server.answer(200, stored(&policy(false))));
    assert!(
        status
            .uri
            .starts_with("/apis/control.kubestellar.io/v1alpha1/bindingpolicies/p/status"),
        "{}",
        status.uri
    );
    let synced = &status.body["status"]["conditions"][0];
    assert_eq!(synced["status"], "False");
    let message = synced["message"].as_str().unwrap();
    assert!(
        message.starts_with("a Binding named p exists that this policy does not own"),
        "{message}"
    );

    // One owned by an earlier policy of that name is the policy's.
    let mut earlier = Binding::new("p", Default::default());
    earlier.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "control.kubestellar.io/v1alpha1".into(),
        kind: "BindingPolicy".into(),
        name: "p".into(),
        uid: "uid-of-an-earlier-p".into(),
        controller: Some(true),
        block_owner_deletion: Some(false),
    }]);
    assert_eq!(writes::foreign_binding("p", &earlier), None);
    assert!(writes::foreign_binding("q", &earlier).is_some());
}

#[tokio::test]
async fn a_status_written_before_an_edit_is_resolved_claims_only_what_was_resolved() {
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    resolutions.set_policy("p", 1, &policy(false).spec, [], &[]);
    // Edited (generation 2) and in the cache, its event still queued behind this flush.
    let mut edited = policy(false);
    edited.metadata.generation = Some(2);
    edited.spec.downsync[0].test.object_names = vec!["b".into()];
    let mut looper = test_loop(&client, vec![edited.clone()], &mut resolutions);
    let ((), status) = tokio::join!(looper.flush_all(), answer_binding_then_status(&mut server, 200));
    assert_eq!(status.body["status"]["observedGeneration"], 1);

    // Its status written (generation 1 observed), the edit is resolved when its event comes.
    edited.status = serde_json::from_value(status.body["status"].clone()).unwrap();
    looper.caches.policies = store(vec![edited]);
    looper.policy_changed("p").await;
    assert_eq!(looper.resolutions.policy("p").map(|s| s.generation), Some(2));
    assert!(!looper.resolutions.take_dirty().is_empty());
}

/// The WDS cache holding the ConfigMap `ns/a` with the UID `uid`.
fn cache_config_map(looper: &Loop<'_>, uid: &str) {
    let cached = serde_json::from_value(json!({"metadata": {"name": "a", "namespace": "ns", "uid": uid}, "data": {}}));
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let gr = GroupResource::new("", "configmaps");
    looper.caches.informers.serve(gr, resource, true, vec![cached.unwrap()]);
}

#[tokio::test]
async fn failed_status_request_labels_are_retried() {
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let object = config_map();
    resolutions.set_policy("p", 1, &policy(true).spec, [(&object, None)], &[]);
    let mut looper = test_loop(&client, vec![policy(true)], &mut resolutions);
    cache_config_map(&looper, "uid-a");
    let ((), (labels, _)) = tokio::join!(looper.flush_all(), async {
        let labels = server.answer(500, mock::failure(500)).await;
        (labels, answer_binding_then_status(&mut server, 200).await)
    });
    assert!(
        labels.uri.starts_with("/api/v1/namespaces/ns/configmaps/a?"),
        "{}",
        labels.uri
    );
    assert!(only_waiting(&looper, &Retry::Labels));
    assert_eq!(
        labels.body["metadata"]["uid"], "uid-a",
        "an apply that cannot create the object"
    );

    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}});
    let ((), again) = tokio::join!(looper.retry(Instant::now() + RETRY_MAX), server.answer(200, applied));
    assert_eq!(again.body, labels.body);
    assert_eq!(looper.retries.waiting(), 0);
}

#[tokio::test]
async fn a_deleted_object_gets_no_status_request_labels_written() {
    let (client, mut server) = mock::client();
    let mut resolutions = Resolutions::default();
    let object = config_map();
    resolutions.set_policy("p", 1, &policy(true).spec, [(&object, None)], &[]);
    let mut looper = test_loop(&client, vec![policy(true)], &mut resolutions);
    cache_config_map(&looper, "uid-a");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}});
    let ((), (labels, _)) = tokio::join!(looper.flush_all(), async {
        let labels = server.answer(200, applied).await;
        (labels, answer_binding_then_status(&mut server, 200).await)
    });
    assert!(
        labels.uri.starts_with("/api/v1/namespaces/ns/configmaps/a?"),
        "{}",
        labels.uri
    );

    // The user deletes it: the policy no longer selects it, and its cache no longer holds it.
    looper.resolutions.set_object(&object.identity.workload_ref(), None);
    looper.caches.informers.serve(
        GroupResource::new("", "configmaps"),
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        true,
        vec![],
    );
    // The Binding's write comes first: no apply to the deleted object (that would create it).
    let ((), _) = tokio::join!(looper.flush_all(), answer_binding_then_status(&mut server, 200));
    assert!(looper.labelled.is_empty());
}
