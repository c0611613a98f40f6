//! WorkStatus names.
//!
//! Upstream names a WorkStatus `<amwUID>-<lower(groupVersion without "/")>-<lower(kind)>-<namespace>-<name>`
//! and cuts it at 253 characters, which can produce invalid names and collisions
//! (docs/upstream-behaviour.md#workstatus-names). We keep upstream's name whenever it is a valid
//! object name, so that tools written against upstream find the same objects, and otherwise
//! shorten it deterministically:
//!
//! `<sanitized amwUID>.<sanitized rest, cut to fit>.<32 hex digits of SHA-256(identity)>`
//!
//! where "sanitized" lower-cases and replaces every character other than `a-z0-9` with `-`,
//! trims `-` at both ends, and empty parts are left out; the identity is the six parts joined
//! by `/`, a character no Kubernetes name contains. The result is always a valid DNS subdomain
//! of at most 253 characters.
//!
//! Why shortened names never collide: a shortened name has a `.` right after the AMW UID,
//! where every verbatim name has a `-` (apiserver UIDs are UUIDs: fixed length, no `.`), so
//! the two forms never meet; two shortened names meet only if 128 bits of SHA-256 of two
//! different identities are equal. Upstream's own format is ambiguous in one place: `<ns>-<name>`
//! reads the same for namespace `a-b`, name `c` and namespace `a`, name `b-c`. The tracker
//! notices when two objects it follows get the same verbatim name and gives both the
//! shortened name ([`shortened_name`]) instead.

/// The longest object name Kubernetes accepts (a DNS subdomain).
pub const MAX_NAME_LEN: usize = 253;
/// Hex digits of the SHA-256 digest kept in a shortened name (128 bits).
const DIGEST_HEX_LEN: usize = 32;
/// At most this much of the AMW UID is kept readable in a shortened name.
const MAX_UID_PART_LEN: usize = 64;

/// The parts of a WorkStatus name: the AppliedManifestWork's UID and the reported object.
#[derive(Clone, Copy, Debug)]
pub struct NameParts<'a> {
    pub amw_uid: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    /// `""` for cluster-scoped objects.
    pub namespace: &'a str,
    pub name: &'a str,
}

/// The name of the WorkStatus reporting on the object described by `parts`.
pub fn work_status_name(parts: NameParts<'_>) -> String {
    let full = format!("{}-{}", parts.amw_uid, readable(parts));
    if full.len() <= MAX_NAME_LEN && is_dns_subdomain(&full) {
        full
    } else {
        shortened_name(parts)
    }
}

/// The shortened form of the name, used where the verbatim form is invalid or ambiguous.
pub fn shortened_name(parts: NameParts<'_>) -> String {
    shortened(parts, &readable(parts))
}

/// Upstream's name after the UID: `<lower(group+version)>-<lower(kind)>-<namespace>-<name>`.
fn readable(parts: NameParts<'_>) -> String {
    format!(
        "{}{}-{}-{}-{}",
        parts.group.to_lowercase(),
        parts.version.to_lowercase(),
        parts.kind.to_lowercase(),
        parts.namespace,
        parts.name
    )
}

fn shortened(parts: NameParts<'_>, rest: &str) -> String {
    let identity = [
        parts.amw_uid,
        parts.group,
        parts.version,
        parts.kind,
        parts.namespace,
        parts.name,
    ]
    .join("/");
    let digest = ring::digest::digest(&ring::digest::SHA256, identity.as_bytes());
    let digest: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let digest = &digest[..DIGEST_HEX_LEN];

    let uid = sanitize(parts.amw_uid);
    let uid = cut(&uid, MAX_UID_PART_LEN);
    // Room left for the readable rest: the total minus the UID, the digest and two dots.
    let room = MAX_NAME_LEN - uid.len() - DIGEST_HEX_LEN - 2;
    let rest = sanitize(rest);
    let rest = cut(&rest, room);
    [uid, rest, digest]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// Lower-case, every character outside `a-z0-9` replaced by `-`, no `-` at either end.
fn sanitize(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    mapped.trim_matches('-').to_string()
}

/// At most `max` characters of an ASCII `text`, without a trailing `-`.
fn cut(text: &str, max: usize) -> &str {
    text[..text.len().min(max)].trim_end_matches('-')
}

/// True when `name` is a DNS subdomain (RFC 1123) as Kubernetes checks object names:
/// dot-separated labels of `a-z0-9-`, each starting and ending alphanumeric, 253 at most.
pub fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(&first), Some(&last)) => {
                    alnum(first) && alnum(last) && bytes.iter().all(|&c| alnum(c) || c == b'-')
                }
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const UID: &str = "0b9bd0a4-53c5-4e43-9f1b-7e3a4d4f8a11";

    fn parts<'a>(group: &'a str, version: &'a str, kind: &'a str, namespace: &'a str, name: &'a str) -> NameParts<'a> {
        NameParts {
            amw_uid: UID,
            group,
            version,
            kind,
            namespace,
            name,
        }
    }

    #[test]
    fn upstream_names_when_valid() {
        assert_eq!(
            work_status_name(parts("apps", "v1", "Deployment", "nginx", "nginx-deployment")),
            format!("{UID}-appsv1-deployment-nginx-nginx-deployment")
        );
        assert_eq!(
            work_status_name(parts("", "v1", "Namespace", "", "nginx")),
            format!("{UID}-v1-namespace--nginx")
        );
    }

    #[test]
    fn invalid_names_are_shortened_to_valid_ones() {
        let name = work_status_name(parts(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "",
            "system:controller:x",
        ));
        assert!(is_dns_subdomain(&name), "{name}");
        assert!(
            name.starts_with(&format!(
                "{UID}.rbac-authorization-k8s-iov1-clusterrole--system-controller-x."
            )),
            "{name}"
        );
        let long = "a".repeat(250);
        let name = work_status_name(parts("apps", "v1", "Deployment", "ns", &long));
        assert_eq!(name.len(), MAX_NAME_LEN, "{name}");
        assert!(is_dns_subdomain(&name));
    }

    #[test]
    fn dns_subdomain_rules() {
        assert!(is_dns_subdomain("a.b-c.d0"));
        for bad in ["", "A", "a..b", "-a", "a-", "a.-b", "a_b", "a/b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }

    fn name_strategy() -> impl Strategy<Value = String> {
        // Mostly plausible names, sometimes characters that need sanitizing, sometimes long.
        prop_oneof![
            "[a-z0-9]([a-z0-9.-]{0,40}[a-z0-9])?",
            "[a-zA-Z0-9:._-]{1,40}",
            "[a-z]{200,260}",
        ]
    }

    proptest! {
        #[test]
        fn names_are_valid_bounded_and_deterministic(
            uid in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            group in prop_oneof![Just(String::new()), "[a-z]{1,10}(\\.[a-z]{1,10}){0,3}"],
            version in "v[0-9](alpha[0-9]|beta[0-9])?",
            kind in "[A-Z][a-zA-Z]{0,30}",
            namespace in prop_oneof![Just(String::new()), "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"],
            name in name_strategy(),
        ) {
            let p = NameParts { amw_uid: &uid, group: &group, version: &version, kind: &kind, namespace: &namespace, name: &name };
            let result = work_status_name(p);
            prop_assert!(result.len() <= MAX_NAME_LEN);
            prop_assert!(is_dns_subdomain(&result), "{}", result);
            prop_assert_eq!(&result, &work_status_name(p));
        }

        #[test]
        fn different_objects_get_different_names(
            uid in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            kinds in proptest::collection::vec("[A-Z][a-z]{0,3}", 2),
            namespaces in proptest::collection::vec(prop_oneof![Just(String::new()), "[a-z]{1,3}"], 2),
            names in proptest::collection::vec(name_strategy(), 2),
        ) {
            let a = NameParts { amw_uid: &uid, group: "apps", version: "v1", kind: &kinds[0], namespace: &namespaces[0], name: &names[0] };
            let b = NameParts { amw_uid: &uid, group: "apps", version: "v1", kind: &kinds[1], namespace: &namespaces[1], name: &names[1] };
            // Inputs that upstream's format maps to the same string are the same object to it too.
            let full = |p: NameParts<'_>| format!("{}-{}-{}-{}", p.kind.to_lowercase(), p.namespace, p.name, p.amw_uid);
            prop_assume!(full(a) != full(b));
            prop_assert_ne!(work_status_name(a), work_status_name(b));
        }
    }
}
