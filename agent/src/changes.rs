//! What changed when the agent recorded or forgot an AppliedManifestWork: what the
//! [`crate::tracker`] and the [`crate::reporters`] it asks give back to the controller.

use std::collections::BTreeSet;

use crate::objects::{Gvr, ObjectKey};

/// What changed when an AppliedManifestWork was recorded or forgotten.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Keys that now report (a newly followed object, or another delivery taking over): their
    /// WorkStatus must be written.
    pub added: Vec<ObjectKey>,
    /// Keys that no longer report (the object is no longer followed, or another delivery took
    /// over): their WorkStatus must go.
    pub removed: Vec<ObjectKey>,
    /// GVRs whose first object is now followed: start an informer.
    pub start: Vec<Gvr>,
    /// GVRs with no followed object left: stop the informer.
    pub stop: Vec<Gvr>,
}

impl Changes {
    /// A GVR released and followed again in one step keeps its informer running.
    pub fn net(&mut self) {
        let both: BTreeSet<Gvr> = self.start.iter().filter(|g| self.stop.contains(g)).cloned().collect();
        self.start.retain(|g| !both.contains(g));
        self.stop.retain(|g| !both.contains(g));
    }
}
