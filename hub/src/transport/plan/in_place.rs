//! Which objects a destination is to go on writing in place, from how the wrapped objects of a
//! mailbox have it write each.

use std::collections::{BTreeMap, BTreeSet};

use crate::transport::types::{Identity, Written};

/// Of the objects in one mailbox, those whose copies a Binding is to have OCM go on writing in
/// place, from how its own ManifestWorks there write each (`own`) and how the others' do
/// (`others`). A copy OCM created in place (for a createOnly policy, or by an earlier hub that
/// used `Update`) has its fields owned by that create, and a server-side apply cannot take them:
/// field ownership is by manager and operation, and OCM's apply and its create are two. What the
/// WDS then removed stayed, and a port or container renamed was merged beside the old one. So:
/// - what the Binding already has written server-side, or in place, stays so;
/// - otherwise (new to it, or createOnly there until now) in place if nobody applies it
///   server-side and someone created it in place: a createOnly option of its own or another's,
///   or another's in-place write. A copy some ManifestWork applies server-side was created so
///   (one that came later finds it there and creates nothing).
pub fn in_place<'a>(
    own: impl Iterator<Item = (&'a Identity, Written)>,
    others: impl Iterator<Item = (&'a Identity, Written)>,
) -> BTreeSet<Identity> {
    let mut own_written: BTreeMap<&Identity, Written> = BTreeMap::new();
    for (identity, written) in own {
        // Held twice (moving between shards): the same object, so the same copy.
        own_written.entry(identity).or_insert(written);
    }
    let (mut server_side, mut created_in_place) = (BTreeSet::new(), BTreeSet::new());
    for (identity, written) in others {
        match written {
            Written::ServerSide => server_side.insert(identity),
            Written::CreateOnly | Written::InPlace => created_in_place.insert(identity),
        };
    }
    let mut in_place: BTreeSet<Identity> = BTreeSet::new();
    for (identity, written) in &own_written {
        let stays = match written {
            Written::ServerSide => false,
            Written::InPlace => true,
            Written::CreateOnly => !server_side.contains(identity),
        };
        if stays {
            in_place.insert((*identity).clone());
        }
    }
    let new_here = created_in_place
        .into_iter()
        .filter(|i| !own_written.contains_key(i) && !server_side.contains(i));
    in_place.extend(new_here.cloned());
    in_place
}
