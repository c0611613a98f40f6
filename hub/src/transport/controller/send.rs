//! The ITS's requests for one wrapped object: its write (applied over the one the cache shows,
//! else created) or deletion, each expected until the watch shows it; and what the ITS refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use ks_shared::names::{ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL, field_manager};
use ks_shared::runtime::{Failure, failure};
use kube::api::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};

use super::expectations::Outcome;
use super::state::{Transport, work_key};
use crate::transport::plugin::{Error, Plugin};

/// The media type that asks an apiserver for an object's metadata alone.
pub(super) const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The ITS's reply about a ManifestWork, as far as it is read: the version written, which
/// object it is and whose.
#[derive(serde::Deserialize)]
pub(super) struct Reply {
    metadata: ReplyMeta,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReplyMeta {
    resource_version: Option<String>,
    uid: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// What a write of a wrapped object came to.
pub(super) enum Sent {
    Written(Reply),
    /// Another's wrapped object has the name: left alone.
    Foreign,
}

impl Reply {
    /// What a cache would keep of `work` as this reply says it was written: its version and UID.
    pub(super) fn outcome<P: Plugin>(&self, work: &P::Wrapped) -> Option<Outcome<P::Cached>> {
        let (Some(version), Some(uid)) = (&self.metadata.resource_version, &self.metadata.uid) else {
            return None;
        };
        let mut cached = P::cached(work);
        cached.meta_mut().uid = Some(uid.clone());
        Some(Outcome::Written(version.clone(), Arc::new(cached)))
    }
}

/// Whether the ITS refused a write for the UID it names: the object of that name is another
/// one (the apiserver will not change an object's immutable `metadata.uid`, 422; one gone is
/// 409).
pub(super) fn uid_refused(status: &kube::core::Status) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
}

/// Whether labels say a wrapped object is `binding`'s of the WDS `wds`. A name alone says
/// nothing: an admin's ManifestWork may have it, or another WDS's.
pub(super) fn of_origin(labels: &BTreeMap<String, String>, binding: &str, wds: &str) -> bool {
    labels.get(ORIGIN_BINDING_LABEL).map(String::as_str) == Some(binding)
        && labels.get(ORIGIN_WDS_LABEL).map(String::as_str) == Some(wds)
}

/// What the ITS refused of one wrapped object's write, for the Binding's status.
#[derive(Debug)]
pub(super) struct Rejection {
    pub(super) message: String,
    /// It may pass with nothing changed here: the Binding is tried again after a back-off.
    pub(super) passing: bool,
}

impl Rejection {
    /// One that only a change (of the Binding, its objects, or the ITS's object) can end.
    pub(super) fn lasting(message: String) -> Rejection {
        Rejection {
            message,
            passing: false,
        }
    }

    pub(super) fn passing(message: String) -> Rejection {
        Rejection { message, passing: true }
    }
}

/// Whether the apiserver refused a write into a namespace because that namespace is being
/// deleted (its NamespaceLifecycle admission's answer, with the cause `NamespaceTerminating`).
pub(super) fn namespace_terminating(status: &kube::core::Status) -> bool {
    status.code == 403
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

impl<P: Plugin> Transport<P> {
    /// Writes one wrapped object of `binding`: applied over the one the cache shows (`ours`, its
    /// UID), else created. A [`Rejection`] when it cannot be written as things are: the ITS
    /// rejects it, another's wrapped object has the name, or the mailbox is missing or being
    /// deleted.
    pub(super) async fn write_work(
        &self,
        binding: &str,
        mailbox: &str,
        name: &str,
        work: &P::Wrapped,
        ours: Option<&str>,
    ) -> Result<Option<Rejection>, Error> {
        let answer = self
            .expecting(binding, (mailbox.to_string(), name.to_string()), async {
                let answer = match ours {
                    Some(uid) => self.send_work(mailbox, name, work, Some(uid)).await.map(Sent::Written),
                    None => self.create_work(binding, mailbox, name, work).await,
                };
                let outcome = match &answer {
                    Ok(Sent::Written(reply)) => reply.outcome::<P>(work),
                    _ => None,
                };
                (outcome, answer)
            })
            .await;
        let err = match answer {
            Ok(Sent::Written(_)) => return Ok(None),
            Ok(Sent::Foreign) => {
                return Ok(Some(Rejection::lasting(format!(
                    "name conflict: {} {mailbox}/{name} exists without this Binding's labels \
                     {ORIGIN_BINDING_LABEL}={binding} and {ORIGIN_WDS_LABEL}={}: it is left alone, and what \
                     it would hold does not reach {mailbox}",
                    P::Wrapped::kind(&()),
                    self.settings.wds_name
                ))));
            }
            Err(err) => err,
        };
        let kube::Error::Api(status) = &err else {
            return Err(err.into());
        };
        match failure(&err) {
            // Replaced since the cache showed it: planned again from a cache that shows it.
            Failure::Refused if uid_refused(status) => Err(err.into()),
            // Deleted, to be made again by OCM (an admin deleted it, or the WEC was accepted
            // again): nothing in what the hub watches changes when it is back.
            Failure::Refused if namespace_terminating(status) => Ok(Some(Rejection::passing(format!(
                "the mailbox namespace {mailbox} is being deleted; trying again: {}",
                status.message
            )))),
            Failure::Refused => Ok(Some(Rejection::lasting(format!(
                "the ITS rejected {} {mailbox}/{name}: {}",
                P::Wrapped::kind(&()),
                status.message
            )))),
            // A WEC not accepted yet: accepting it changes its inventory object, which brings
            // the Binding back. An accepted WEC's mailbox deleted and not made again yet: its
            // coming back changes nothing the hub watches, so the Binding is tried again.
            Failure::Moot => {
                let message = format!(
                    "the mailbox namespace {mailbox} does not exist (is the WEC accepted into the ITS?): {}",
                    status.message
                );
                let accepted = self
                    .clusters
                    .state()
                    .iter()
                    .any(|c| self.plugin.mailbox(&c.name_any()) == mailbox && P::accepted(c));
                Ok(Some(if accepted {
                    Rejection::passing(message)
                } else {
                    Rejection::lasting(message)
                }))
            }
            Failure::Transient => Err(err.into()),
        }
    }

    /// Creates a wrapped object of `binding`. One found under its name (the cache was behind, or
    /// it is another's) is written over only if its labels say it is `binding`'s of this WDS, and
    /// then only that object (its UID); otherwise it is [`Sent::Foreign`], and nothing is sent.
    pub(super) async fn create_work(
        &self,
        binding: &str,
        mailbox: &str,
        name: &str,
        work: &P::Wrapped,
    ) -> Result<Sent, kube::Error> {
        let taken = match self.send_work(mailbox, name, work, None).await {
            Err(kube::Error::Api(status)) if status.code == 409 => status,
            answer => return answer.map(Sent::Written),
        };
        let request = kube::core::Request::new(P::Wrapped::url_path(&(), Some(mailbox)))
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        let found = match self.answered_in_metadata("get", request).await {
            Ok(found) => found.metadata,
            // Gone meanwhile: created on the next try.
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(kube::Error::Api(taken)),
            Err(err) => return Err(err),
        };
        if !of_origin(&found.labels, binding, &self.settings.wds_name) {
            return Ok(Sent::Foreign);
        }
        let Some(uid) = found.uid else {
            return Err(kube::Error::Api(taken));
        };
        self.send_work(mailbox, name, work, Some(&uid)).await.map(Sent::Written)
    }

    /// The ITS's answer to a write of one wrapped object: server-side applied over the object of
    /// the UID `ours` (the ITS refuses one deleted or replaced meanwhile, with 409), else created
    /// (POST). See `ks-bench write-cost`: for 100 ManifestWorks of 213 kB the
    /// ITS used 5 to 6 CPU-s to create them against 8 to 9 to apply them, as it parses an apply's
    /// body as YAML. Once OCM's per-manifest status is in them, a JSON patch cost it more than an
    /// apply in each of 6 paired runs (26 to 34 against 24 to 28 CPU-s): the ITS turns the whole
    /// object, status and all, into JSON and back to patch it. Written as this WDS's own field
    /// manager.
    pub(super) async fn send_work(
        &self,
        mailbox: &str,
        name: &str,
        work: &P::Wrapped,
        ours: Option<&str>,
    ) -> Result<Reply, kube::Error> {
        self.settings.metrics.common.writes.inc();
        // Serialized straight into the request: as a JSON value tree, 8 large ones in flight
        // took a quarter of the hub's peak heap. The reply is read for its version and UID
        // only: the watch brings what the hub keeps of the ManifestWork.
        let request = kube::core::Request::new(P::Wrapped::url_path(&(), Some(mailbox)));
        let manager = field_manager::transport_of(&self.settings.wds_name);
        let (verb, request) = match ours {
            Some(uid) => {
                // Shares its manifests: no copy of the objects.
                let mut work = work.clone();
                work.meta_mut().uid = Some(uid.to_string());
                let params = PatchParams::apply(&manager).force();
                ("patch", request.patch(name, &params, &Patch::Apply(&work)))
            }
            None => {
                let params = PostParams {
                    field_manager: Some(manager),
                    ..Default::default()
                };
                let body = serde_json::to_vec(work).map_err(kube::Error::SerdeError)?;
                ("create", request.create(&params, body))
            }
        };
        let request = request.map_err(kube::Error::BuildRequest)?;
        self.settings.metrics.written_bytes.inc_by(request.body().len() as u64);
        self.answered_in_metadata(verb, request).await
    }

    /// The ITS's answer to a request about a ManifestWork, asked for as metadata only
    /// (`as=PartialObjectMetadata`). The whole ManifestWork, status and all, is up to a few MB
    /// once OCM's per-manifest status is in it: the ITS would encode it and the hub hold all of
    /// it, only for its version.
    pub(super) async fn answered_in_metadata(
        &self,
        verb: &'static str,
        mut request: http::Request<Vec<u8>>,
    ) -> Result<Reply, kube::Error> {
        request.extensions_mut().insert(verb);
        request
            .headers_mut()
            .insert(http::header::ACCEPT, http::HeaderValue::from_static(METADATA_ONLY));
        self.its.request::<Reply>(request).await
    }

    /// Deletes a wrapped object of `binding` no longer wanted: only the object the cache shows
    /// (its UID, which every cached one has), so one created under its name meanwhile stays (the
    /// ITS answers 409, retried from a cache that shows what happened).
    pub(super) async fn delete_work(&self, binding: &str, stale: &P::Cached) -> Result<(), Error> {
        self.settings.metrics.common.writes.inc();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: stale.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let request = kube::core::Request::new(P::Cached::url_path(&(), stale.namespace().as_deref()))
            .delete(&stale.name_any(), &params)
            .map_err(kube::Error::BuildRequest)?;
        self.expecting(binding, work_key(stale), async {
            let deleted = match self.answered_in_metadata("delete", request).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(err) => Err(err.into()),
            };
            (deleted.is_ok().then_some(Outcome::Deleted), deleted)
        })
        .await
    }
}
