//! The Node plegd runs on, as far as plegd reads it: the version of its kubelet
//! (`status.nodeInfo.kubeletVersion`), read once at start so that the status plegd generates is the
//! one that kubelet writes. A GET of one Node, which the kubelet's own credential may do too.

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use super::pod::NodeName;

/// The version the kubelet of `node` reports; None when the Node does not exist or reports none
/// (a node no kubelet runs).
pub async fn kubelet_version(client: &kube::Client, node: &NodeName) -> Result<Option<String>, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes.get_opt(node.as_str()).await?.and_then(reported_version))
}

/// What a Node says of its kubelet's version, where it says anything.
fn reported_version(node: Node) -> Option<String> {
    node.status?
        .node_info
        .map(|info| info.kubelet_version)
        .filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, NodeSystemInfo};

    #[test]
    fn a_node_says_its_kubelets_version_or_nothing() {
        let with = |version: &str| Node {
            status: Some(NodeStatus {
                node_info: Some(NodeSystemInfo {
                    kubelet_version: version.to_owned(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        assert_eq!(reported_version(with("v1.35.4")), Some("v1.35.4".to_owned()));
        assert_eq!(reported_version(with(" ")), None);
        assert_eq!(reported_version(Node::default()), None);
    }
}
