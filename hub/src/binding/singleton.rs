//! The BindingPolicy status error for singleton status requests that cannot be met, worded
//! exactly as upstream words it (docs/upstream-behaviour.md#bindingpolicy-status) so existing
//! alerts and scripts keep working.

use serde::Serialize;

use super::workload::ObjectIdentity;

pub(super) const SINGLETON_ERROR_PREFIX: &str = "Singleton reported status return is requested but some objects have the wrong number of associated WECs, for example: ";

/// Upstream stops collecting after four examples.
const MAX_EXAMPLES: usize = 4;

/// The error for objects whose singleton status return is requested, given with their qualified
/// singleton WEC counts; `None` when every count is exactly 1.
///
/// Upstream shows whichever four examples a map iteration yields; we show the first four in
/// identity order, so the message, and with it the policy's status, stays the same between syncs.
pub fn singleton_error<'a>(requests: impl IntoIterator<Item = (&'a ObjectIdentity, usize)>) -> Option<String> {
    let mut wrong: Vec<(&ObjectIdentity, usize)> = requests.into_iter().filter(|&(_, wecs)| wecs != 1).collect();
    if wrong.is_empty() {
        return None;
    }
    wrong.sort_unstable();
    let examples: Vec<Example> = wrong
        .into_iter()
        .take(MAX_EXAMPLES)
        .map(|(id, num_wecs)| Example::new(id, num_wecs))
        .collect();
    let json = serde_json::to_string(&examples).expect("structs of strings and integers always serialize");
    Some(format!("{SINGLETON_ERROR_PREFIX}{json}"))
}

/// Upstream's Go `objectWithNumWECs`, field for field: Go's JSON encoding uses the field names
/// in declaration order, which the serde renames and field order here reproduce.
#[derive(Serialize)]
struct Example<'a> {
    #[serde(rename = "ObjectID")]
    object_id: GoObjectId<'a>,
    #[serde(rename = "NumWECs")]
    num_wecs: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct GoObjectId<'a> {
    #[serde(rename = "GVK")]
    gvk: GoGroupVersionKind<'a>,
    resource: &'a str,
    object_name: GoObjectName<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct GoGroupVersionKind<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct GoObjectName<'a> {
    namespace: &'a str,
    name: &'a str,
}

impl<'a> Example<'a> {
    fn new(id: &'a ObjectIdentity, num_wecs: usize) -> Self {
        Example {
            object_id: GoObjectId {
                gvk: GoGroupVersionKind {
                    group: &id.group,
                    version: &id.version,
                    kind: &id.kind,
                },
                resource: &id.resource,
                object_name: GoObjectName {
                    namespace: &id.namespace,
                    name: &id.name,
                },
            },
            num_wecs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::testing::*;

    #[test]
    fn no_error_when_every_object_has_exactly_one_wec() {
        let web = deployment("ns1", "web").identity;
        assert_eq!(singleton_error([]), None);
        assert_eq!(singleton_error([(&web, 1)]), None);
    }

    #[test]
    fn the_message_is_upstreams_exact_string() {
        let web = deployment("ns1", "web").identity;
        let ns = namespace("ns1").identity;
        let fine = config_map("ns1", "cm").identity;
        assert_eq!(
            singleton_error([(&web, 2), (&fine, 1), (&ns, 0)]).unwrap(),
            concat!(
                "Singleton reported status return is requested but some objects have the wrong number of ",
                "associated WECs, for example: [",
                r#"{"ObjectID":{"GVK":{"Group":"","Version":"v1","Kind":"Namespace"},"Resource":"namespaces","#,
                r#""ObjectName":{"Namespace":"","Name":"ns1"}},"NumWECs":0},"#,
                r#"{"ObjectID":{"GVK":{"Group":"apps","Version":"v1","Kind":"Deployment"},"Resource":"deployments","#,
                r#""ObjectName":{"Namespace":"ns1","Name":"web"}},"NumWECs":2}]"#,
            )
        );
    }

    #[test]
    fn at_most_four_examples_the_first_in_identity_order() {
        let names = ["f", "b", "e", "a", "d", "c"];
        let ids: Vec<ObjectIdentity> = names.iter().map(|n| config_map("ns1", n).identity).collect();
        let message = singleton_error(ids.iter().map(|id| (id, 3))).unwrap();
        let json = message.strip_prefix(SINGLETON_ERROR_PREFIX).unwrap();
        let examples: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
        let shown: Vec<&str> = examples
            .iter()
            .map(|e| e["ObjectID"]["ObjectName"]["Name"].as_str().unwrap())
            .collect();
        assert_eq!(shown, ["a", "b", "c", "d"]);
    }
}
