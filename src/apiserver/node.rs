//! The Node plegd runs on, as far as plegd reads it: the version of its kubelet
//! (`status.nodeInfo.kubeletVersion`), read once at start so that the status plegd generates is the
//! one that kubelet writes. A GET of one Node, which the kubelet's own credential may do too. Only
//! that one field is read: a Node whose other fields are not as the API says costs plegd nothing.

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

use super::pod::NodeName;

/// The version the kubelet of `node` reports; None when the Node does not exist or reports none
/// (a node no kubelet runs).
pub async fn kubelet_version(client: &kube::Client, node: &NodeName) -> Result<Option<String>, kube::Error> {
    let nodes: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<Node>(&()));
    Ok(nodes
        .get_opt(node.as_str())
        .await?
        .and_then(|node| reported_version(&node.data)))
}

/// What a Node's fields (`status` among them) say of its kubelet's version, where they say it.
fn reported_version(data: &Value) -> Option<String> {
    data.pointer("/status/nodeInfo/kubeletVersion")?
        .as_str()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_says_its_kubelets_version_or_nothing() {
        let with = |version: Value| json!({"status": {"nodeInfo": {"kubeletVersion": version}}});
        assert_eq!(reported_version(&with(json!("v1.35.4"))), Some("v1.35.4".to_owned()));
        assert_eq!(reported_version(&with(json!(" "))), None);
        assert_eq!(reported_version(&with(json!(135))), None, "not a string: none");
        assert_eq!(reported_version(&json!({"status": {}})), None);
        assert_eq!(reported_version(&json!({})), None);
        // Only the version is read: the rest of nodeInfo may be missing.
        assert_eq!(
            reported_version(&json!({"status": {"nodeInfo": {"kubeletVersion": "v1.36.3"}, "images": "odd"}})),
            Some("v1.36.3".to_owned())
        );
    }
}
