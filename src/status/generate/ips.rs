//! Pod IPs: the runtime's IPs parsed as Go parses them and ordered by the node's families
//! (`sortPodIPs`), and the pod's and host's IPs of a status, host-network pods' included.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{HostIP, PodIP, PodStatus};

/// Parse an IP as Go's `netutils.ParseIPSloppy` does: IPv4 parts may have leading zeros, read as
/// decimal (`010.000.000.001` is 10.0.0.1), and an IPv4-mapped IPv6 address is the IPv4 address
/// (Go's `To4()` is not nil for it: `IsIPv4` says true and `String()` prints `1.2.3.4`). None for
/// anything that is not an IP.
pub fn parse_ip_sloppy(ip: &str) -> Option<IpAddr> {
    if let Ok(parsed) = ip.parse::<IpAddr>() {
        return Some(match parsed {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(parsed, IpAddr::V4),
            v4 => v4,
        });
    }
    let mut octets = [0u8; 4];
    let mut parts = ip.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    parts.next().is_none().then(|| IpAddr::from(octets))
}

/// `sortPodIPs`: the runtime's IPs parsed and written in canonical form, then the first of the
/// node's primary family (IPv4 when the node has no IP) and the first of the other. Whatever does
/// not parse is left out.
pub fn sort_pod_ips(ips: &[String], node_ips: &[String]) -> Vec<String> {
    let primary_v6 = node_ips
        .first()
        .and_then(|ip| parse_ip_sloppy(ip))
        .is_some_and(|ip| ip.is_ipv6());
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|ip| parse_ip_sloppy(ip)).collect();
    let mut out = Vec::new();
    out.extend(
        parsed
            .iter()
            .find(|ip| ip.is_ipv6() == primary_v6)
            .map(IpAddr::to_string),
    );
    out.extend(
        parsed
            .iter()
            .find(|ip| ip.is_ipv6() != primary_v6)
            .map(IpAddr::to_string),
    );
    out
}

/// The pod's and the host's IPs as `generateAPIPodStatus` writes them into `status`: the runtime's
/// (`sortPodIPs`), and for a pod on the host's network the node's primary IP when the runtime gave
/// none and, on a dual-stack node, the node's IP of the other family when the runtime gave one
/// family only (kubernetes#105320). A pod the runtime gives no IP (its sandbox is gone) keeps the
/// IPs `old` has. The host IPs are the node's, sorted the same way.
pub(super) fn set_pod_and_host_ips(
    status: &mut PodStatus,
    old: &PodStatus,
    runtime_ips: &[String],
    node_ips: &[String],
    host_network: bool,
) {
    let mut pod_ips = sort_pod_ips(runtime_ips, node_ips);
    let host_ips = sort_pod_ips(node_ips, node_ips);
    if host_network {
        if pod_ips.is_empty() {
            pod_ips.extend(host_ips.first().cloned());
        }
        if let ([only], [_, second]) = (pod_ips.as_slice(), host_ips.as_slice())
            && only.contains(':') != second.contains(':')
        {
            pod_ips.push(second.clone());
        }
    }
    if pod_ips.is_empty() {
        status.pod_ip = old.pod_ip.clone();
        status.pod_ips = old.pod_ips.clone();
    } else {
        status.pod_ip = pod_ips.first().cloned();
        status.pod_ips = Some(pod_ips.into_iter().map(|ip| PodIP { ip }).collect());
    }
    if let Some(first) = host_ips.first() {
        status.host_ip = Some(first.clone());
        status.host_ips = Some(host_ips.into_iter().map(|ip| HostIP { ip }).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::pod::ApiPod;
    use crate::kubecontainer::RuntimePodStatus;
    use crate::status::generate::test_support::*;
    use crate::status::generate::*;

    #[test]
    fn host_network_pods_take_node_ips_and_dead_pods_keep_theirs() {
        let mut pod = pod_with(&["app"], vec![], "Always");
        pod.spec.host_network = true;
        let s = status_of(&pod, &RuntimePodStatus::default(), at(1));
        assert_eq!(s.pod_ip.as_deref(), Some("192.0.2.10"));
        let mut pod = pod_with(&["app"], vec![], "Always");
        pod.status = Some(PodStatus {
            pod_ip: Some("10.1.0.9".into()),
            pod_ips: Some(vec![PodIP { ip: "10.1.0.9".into() }]),
            ..PodStatus::default()
        });
        assert_eq!(
            status_of(&pod, &RuntimePodStatus::default(), at(1)).pod_ip.as_deref(),
            Some("10.1.0.9")
        );
    }

    fn ips(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// The status generated for `pod` when the runtime reports `cri` as its IPs on a node with
    /// `node` IPs, and its pod IPs.
    fn with_ips(pod: &ApiPod, cri: &[&str], node: &[String]) -> (PodStatus, Vec<String>) {
        let runtime = RuntimePodStatus {
            ips: ips(cri),
            ..RuntimePodStatus::default()
        };
        let s = generate(&StatusInput {
            pod,
            runtime: &runtime,
            runtime_name: "containerd",
            node_ips: node,
            recursive_read_only_handlers: Some(&[]),
            stop_signals: false,
            kubelet: KubeletMinor::V1_37,
            now: at(1),
        });
        let got = s
            .pod_ips
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.ip)
            .collect();
        (s, got)
    }

    /// Go's `net.ParseIP` reads an IPv4-mapped IPv6 address as the IPv4 address it maps, so the
    /// kubelet sorts it as IPv4 and writes it in IPv4 form; other IPv6 forms stay IPv6.
    #[test]
    fn an_ipv4_mapped_address_is_ipv4_as_go_reads_it() {
        assert_eq!(parse_ip_sloppy("::ffff:10.0.0.7"), Some(IpAddr::from([10, 0, 0, 7])));
        assert_eq!(parse_ip_sloppy("::FFFF:0a00:0007"), Some(IpAddr::from([10, 0, 0, 7])));
        assert!(
            parse_ip_sloppy("::10.0.0.7").is_some_and(|ip| ip.is_ipv6()),
            "IPv4-compatible is not mapped"
        );
        assert!(parse_ip_sloppy("fd00::7").is_some_and(|ip| ip.is_ipv6()));
        let node = ips(&["fd00::1", "192.0.2.10"]);
        assert_eq!(
            sort_pod_ips(&ips(&["::ffff:10.0.0.7", "fd00::7"]), &node),
            ["fd00::7", "10.0.0.7"]
        );
        let node = ips(&["192.0.2.10"]);
        assert_eq!(sort_pod_ips(&ips(&["::ffff:10.0.0.7"]), &node), ["10.0.0.7"]);
    }

    /// kubelet_pods_test.go `TestSortPodIPs` and `TestGenerateAPIPodStatusPodIPs` (their cases are
    /// the same), plus the runtime's IPs in non-canonical form.
    #[test]
    fn upstream_sort_pod_ips() {
        /// A row: the node's IP (empty: none), the runtime's IPs, the pod IPs.
        struct SortCase {
            name: &'static str,
            node_ip: &'static str,
            cri: &'static [&'static str],
            want: &'static [&'static str],
        }
        let cases = [
            SortCase {
                name: "Simple",
                node_ip: "",
                cri: &["10.0.0.1"],
                want: &["10.0.0.1"],
            },
            SortCase {
                name: "Dual-stack",
                node_ip: "",
                cri: &["10.0.0.1", "fd01::1234"],
                want: &["10.0.0.1", "fd01::1234"],
            },
            SortCase {
                name: "Dual-stack with explicit node IP",
                node_ip: "192.168.1.1",
                cri: &["10.0.0.1", "fd01::1234"],
                want: &["10.0.0.1", "fd01::1234"],
            },
            SortCase {
                name: "Dual-stack with CRI returning wrong family first",
                node_ip: "",
                cri: &["fd01::1234", "10.0.0.1"],
                want: &["10.0.0.1", "fd01::1234"],
            },
            SortCase {
                name: "Dual-stack with explicit node IP with CRI returning wrong family first",
                node_ip: "192.168.1.1",
                cri: &["fd01::1234", "10.0.0.1"],
                want: &["10.0.0.1", "fd01::1234"],
            },
            SortCase {
                name: "Dual-stack with IPv6 node IP",
                node_ip: "fd00::5678",
                cri: &["10.0.0.1", "fd01::1234"],
                want: &["fd01::1234", "10.0.0.1"],
            },
            SortCase {
                name: "Dual-stack with IPv6 node IP, other CRI order",
                node_ip: "fd00::5678",
                cri: &["fd01::1234", "10.0.0.1"],
                want: &["fd01::1234", "10.0.0.1"],
            },
            SortCase {
                name: "No Pod IP matching Node IP",
                node_ip: "fd00::5678",
                cri: &["10.0.0.1"],
                want: &["10.0.0.1"],
            },
            SortCase {
                name: "No Pod IP matching (unspecified) Node IP",
                node_ip: "",
                cri: &["fd01::1234"],
                want: &["fd01::1234"],
            },
            SortCase {
                name: "Multiple IPv4 IPs",
                node_ip: "",
                cri: &["10.0.0.1", "10.0.0.2", "10.0.0.3"],
                want: &["10.0.0.1"],
            },
            SortCase {
                name: "Multiple Dual-Stack IPs",
                node_ip: "",
                cri: &["10.0.0.1", "10.0.0.2", "fd01::1234", "10.0.0.3", "fd01::5678"],
                want: &["10.0.0.1", "fd01::1234"],
            },
            SortCase {
                name: "Badly-formatted IPs from CRI",
                node_ip: "",
                cri: &["010.000.000.001", "fd01:0:0:0:0:0:0:1234"],
                want: &["10.0.0.1", "fd01::1234"],
            },
            SortCase {
                name: "Not an IP is left out",
                node_ip: "",
                cri: &["ten.0.0.1", "10.0.0.256", "1.2.3", "١٠.0.0.1", "10.0.0.2"],
                want: &["10.0.0.2"],
            },
        ];
        for SortCase {
            name,
            node_ip,
            cri,
            want,
        } in cases
        {
            let node = if node_ip.is_empty() { vec![] } else { ips(&[node_ip]) };
            assert_eq!(sort_pod_ips(&ips(cri), &node), ips(want), "{name}");
            // The same through the whole generator (TestGenerateAPIPodStatusPodIPs).
            let (s, got) = with_ips(&pod_with(&["app"], vec![], "Always"), cri, &node);
            assert_eq!(got, ips(want), "{name}");
            assert_eq!(s.pod_ip.as_deref(), Some(want[0]), "{name}");
        }
    }

    /// kubelet_pods_test.go `TestGenerateAPIPodStatusHostNetworkPodIPs` and
    /// `TestNodeAddressUpdatesGenerateAPIPodStatusHostNetworkPodIPs`. plegd does not read the Node
    /// object: the host IPs the kubelet would pick from its addresses (the first InternalIP of each
    /// family) are given as `--node-ip`, so the cases about which address type wins and about
    /// node addresses changing after start are expressed through the IPs they end in.
    #[test]
    fn upstream_host_network_pod_ips() {
        /// A row: the node's IPs, the runtime's IPs, the pod IPs.
        struct HostNetworkCase {
            name: &'static str,
            node: &'static [&'static str],
            cri: &'static [&'static str],
            want: &'static [&'static str],
        }
        let cases = [
            HostNetworkCase {
                name: "Simple",
                node: &["10.0.0.1"],
                cri: &[],
                want: &["10.0.0.1"],
            },
            HostNetworkCase {
                name: "InternalIP is preferred over ExternalIP",
                node: &["10.0.0.1"],
                cri: &[],
                want: &["10.0.0.1"],
            },
            HostNetworkCase {
                name: "Single-stack addresses in dual-stack cluster",
                node: &["10.0.0.1"],
                cri: &[],
                want: &["10.0.0.1"],
            },
            HostNetworkCase {
                name: "Multiple single-stack addresses in dual-stack cluster",
                node: &["10.0.0.1", "10.0.0.2"],
                cri: &[],
                want: &["10.0.0.1"],
            },
            HostNetworkCase {
                name: "Dual-stack addresses in dual-stack cluster",
                node: &["10.0.0.1", "fd01::1234"],
                cri: &[],
                want: &["10.0.0.1", "fd01::1234"],
            },
            HostNetworkCase {
                name: "CRI PodIPs override NodeAddresses",
                node: &["10.0.0.1", "fd01::1234"],
                cri: &["192.168.0.1"],
                want: &["192.168.0.1", "fd01::1234"],
            },
            HostNetworkCase {
                name: "CRI dual-stack PodIPs override NodeAddresses",
                node: &["10.0.0.1", "fd01::1234"],
                cri: &["192.168.0.1", "2001:db8::2"],
                want: &["192.168.0.1", "2001:db8::2"],
            },
            HostNetworkCase {
                name: "CRI dual-stack PodIPs override NodeAddresses prefer IPv4",
                node: &["10.0.0.1", "fd01::1234"],
                cri: &["2001:db8::2", "192.168.0.1"],
                want: &["192.168.0.1", "2001:db8::2"],
            },
            HostNetworkCase {
                name: "Immutable after update node addresses single-stack",
                node: &["10.0.0.1"],
                cri: &["10.0.0.1"],
                want: &["10.0.0.1"],
            },
            HostNetworkCase {
                name: "Immutable after update node addresses dual-stack",
                node: &["10.0.0.1", "2001:db8::2"],
                cri: &["10.0.0.1", "2001:db8::2"],
                want: &["10.0.0.1", "2001:db8::2"],
            },
            HostNetworkCase {
                name: "Update secondary after new secondary address dual-stack",
                node: &["10.0.0.1", "2001:db8::2"],
                cri: &["10.0.0.1"],
                want: &["10.0.0.1", "2001:db8::2"],
            },
        ];
        for HostNetworkCase { name, node, cri, want } in cases {
            let mut pod = pod_with(&["app"], vec![], "Always");
            pod.spec.host_network = true;
            let (s, got) = with_ips(&pod, cri, &ips(node));
            assert_eq!(got, ips(want), "{name}");
            if cri.is_empty() {
                assert_eq!(s.host_ip, s.pod_ip, "{name}: hostIP is podIP");
            }
        }
    }
}
