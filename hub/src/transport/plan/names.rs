//! The names of a Binding's wrapped objects: one per shard (or per object), kept as upstream
//! named them where an earlier version did.

use std::collections::BTreeSet;

use crate::transport::types::Origin;

/// The longest ManifestWork name: OCM's work agent names the AppliedManifestWork on the WEC
/// `<hub hash>-<name>` (64 hex digits and a dash), a DNS subdomain of at most 253 characters.
pub const MAX_WORK_NAME: usize = 253 - 65;

/// How many hex digits of a hash end a binding name cut to fit [`MAX_WORK_NAME`].
const NAME_HASH_DIGITS: usize = 10;

/// The name of a new ManifestWork. One object per work: `<bindingUID>-<wds>-<objectUID>`, as
/// upstream with `--max-num-wrapped=1` (UIDs have one length, so no two origins share a name).
/// Otherwise `<binding>.<wds>.<shard>`: a WDS name is a DNS label, without dots, so the last two
/// dots tell binding, WDS and shard apart, where upstream's `<binding>-<wds>-<shard>` gave policy
/// `x-a` of WDS `b` and policy `x` of WDS `a-b` the same name; and as no name of upstream's form
/// ends in `.<shard>`, neither meets one of those. A binding name too long for
/// [`MAX_WORK_NAME`] is cut, and ends in a hash of the whole.
pub fn work_name(origin: &Origin<'_>, shard: usize, only_object_uid: Option<&str>) -> String {
    if let Some(uid) = only_object_uid {
        return format!("{}-{}-{uid}", origin.binding_uid, origin.wds);
    }
    let suffix = format!(".{}.{shard}", origin.wds);
    if origin.binding.len() + suffix.len() <= MAX_WORK_NAME {
        return format!("{}{suffix}", origin.binding);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, origin.binding.as_bytes());
    let hash: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let kept = MAX_WORK_NAME.saturating_sub(suffix.len() + 1 + NAME_HASH_DIGITS);
    // A DNS subdomain's labels end in a letter or digit; a binding name is ASCII.
    let cut = origin.binding[..kept].trim_end_matches(['.', '-']);
    format!("{cut}-{}{suffix}", &hash[..NAME_HASH_DIGITS])
}

/// Upstream's name of a shard's ManifestWork, `<binding>-<wds>-<shard>`, which earlier versions
/// gave theirs.
fn upstream_work_name(origin: &Origin<'_>, shard: usize) -> String {
    format!("{}-{}-{shard}", origin.binding, origin.wds)
}

/// The name of `origin`'s ManifestWork of `shard` in a mailbox where its ManifestWorks are named
/// `existing`: upstream's name if one is (written so by an earlier version: an upgrade renames
/// nothing), else [`work_name`].
pub fn shard_work_name(
    origin: &Origin<'_>,
    shard: usize,
    only_object_uid: Option<&str>,
    existing: &BTreeSet<String>,
) -> String {
    let upstream = upstream_work_name(origin, shard);
    if only_object_uid.is_none() && existing.contains(&upstream) {
        return upstream;
    }
    work_name(origin, shard, only_object_uid)
}

/// The shard a ManifestWork of `origin` holds, by its name ([`work_name`]'s or upstream's);
/// `None` for one named after its object's UID (whose last segment may be all digits, and is no
/// shard).
pub fn shard_of(origin: &Origin<'_>, name: &str) -> Option<usize> {
    let shard = name.rsplit(['.', '-']).next()?.parse().ok()?;
    (work_name(origin, shard, None) == name || upstream_work_name(origin, shard) == name).then_some(shard)
}
