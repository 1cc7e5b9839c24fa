//! `containerStatuses[].resources` and `containerStatuses[].user`, as the kubelet writes them since
//! 1.33 (`convertContainerStatusResources`, `convertContainerStatusUser` in `kubelet_pods.go`), and
//! the few resource quantity rules they need. Pure.
//!
//! The kubelet starts a container's status resources from its *allocation* (what it admitted) and
//! overrides CPU and memory with what the runtime reports it applied. plegd does not admit or resize
//! pods, so the allocation it starts from is the pod spec; what the runtime applied comes from the
//! same runtime read as the rest of the status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, ContainerUser, LinuxContainerUser, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::apiserver::pod::{ApiContainer, ApiPodSpec};
use crate::kubecontainer::{RuntimeContainerState, RuntimeContainerStatus, RuntimeContainerUser};

/// `cm.MinShares`: a CPU request at or below this many millicores is the kernel's floor.
const MIN_SHARES_MILLI: i64 = 2;
/// `cm.MinMilliCPULimit`: a CPU limit at or below this is the smallest quota the kubelet sets.
const MIN_MILLI_CPU_LIMIT: i64 = 10;

/// `convertContainerStatusUser`.
pub fn api_user(user: &RuntimeContainerUser) -> ContainerUser {
    ContainerUser {
        linux: user.linux.as_ref().map(|l| LinuxContainerUser {
            uid: l.uid,
            gid: l.gid,
            supplemental_groups: (!l.supplemental_groups.is_empty()).then(|| l.supplemental_groups.clone()),
        }),
    }
}

/// `convertContainerStatusResources` for a container the kubelet keeps an allocation for (regular
/// containers and sidecars). `status` is the container's new API status (its id already set),
/// `old` the one the apiserver holds.
///
/// - not running: the allocation as it is;
/// - running: CPU limit, memory limit and CPU request as the runtime reports them (a CPU value at
///   or below the kernel's floor keeps the allocated one when that is at or below it too); a value
///   the runtime does not report keeps the old status's value while the same container keeps
///   running (`preserveOldResourcesValue`), else the allocated one.
pub fn status_resources(
    allocated: Option<&ResourceRequirements>,
    runtime: &RuntimeContainerStatus,
    status: &ContainerStatus,
    old: Option<&ContainerStatus>,
) -> ResourceRequirements {
    let mut resources = allocated.cloned().unwrap_or_default();
    if runtime.state != RuntimeContainerState::Running {
        return resources;
    }
    let applied = runtime.resources.unwrap_or_default();
    let old_resources = old
        .filter(|o| {
            o.state.as_ref().is_some_and(|s| s.running.is_some())
                && o.container_id.is_some()
                && o.container_id == status.container_id
        })
        .and_then(|o| o.resources.as_ref());
    if let Some(limits) = resources.limits.as_mut() {
        let old_limits = old_resources.and_then(|r| r.limits.as_ref());
        set_cpu(limits, applied.cpu_limit_milli, MIN_MILLI_CPU_LIMIT, old_limits);
        match applied.memory_limit_bytes {
            Some(bytes) => {
                limits.insert("memory".to_owned(), Quantity(format_binary(bytes)));
            }
            None => preserve(limits, "memory", old_limits),
        }
    }
    if let Some(requests) = resources.requests.as_mut() {
        let old_requests = old_resources.and_then(|r| r.requests.as_ref());
        set_cpu(requests, applied.cpu_request_milli, MIN_SHARES_MILLI, old_requests);
    }
    resources
}

/// `preserveOldResourcesValue`: `name` as the old status had it, if it had it.
fn preserve(list: &mut ResourceList, name: &str, old: Option<&ResourceList>) {
    if let Some(q) = old.and_then(|o| o.get(name)) {
        list.insert(name.to_owned(), q.clone());
    }
}

/// The CPU value of a limit or request list: what the runtime applied, unless both it and the
/// allocated value are at or below the kernel's `floor` (millicores), where the allocated one
/// stays; when the runtime reports none, the old status's value.
fn set_cpu(list: &mut ResourceList, applied: Option<i64>, floor: i64, old: Option<&ResourceList>) {
    match applied {
        Some(milli) => {
            let allocated = list.get("cpu").and_then(|q| milli_value(&q.0)).unwrap_or(0);
            if milli > floor || allocated > floor {
                list.insert("cpu".to_owned(), Quantity(format_milli(milli)));
            }
        }
        None => preserve(list, "cpu", old),
    }
}

const DECIMAL_SUFFIXES: [(i32, &str); 10] = [
    (-9, "n"),
    (-6, "u"),
    (-3, "m"),
    (0, ""),
    (3, "k"),
    (6, "M"),
    (9, "G"),
    (12, "T"),
    (15, "P"),
    (18, "E"),
];
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// `mantissa × 10^exp` in the canonical DecimalSI form (`Quantity.String`): the largest exponent
/// that is a multiple of three and keeps the mantissa whole.
fn format_decimal(mut mantissa: i128, mut exp: i32) -> String {
    if mantissa == 0 {
        return "0".to_owned();
    }
    while mantissa % 1000 == 0 && exp < 18 {
        mantissa /= 1000;
        exp += 3;
    }
    match DECIMAL_SUFFIXES.iter().find(|(e, _)| *e == exp) {
        Some((_, suffix)) => format!("{mantissa}{suffix}"),
        None => format!("{mantissa}e{exp}"),
    }
}

/// Millicores as the kubelet writes them (`resource.NewMilliQuantity(v, DecimalSI)`): `100m`, `1`,
/// `1500m`.
pub fn format_milli(milli: i64) -> String {
    format_decimal(i128::from(milli), -3)
}

/// Bytes as the kubelet writes them (`resource.NewQuantity(v, BinarySI)`): `64Mi`; a value that no
/// power of 1024 divides stays in bytes; below 1024 it is written in DecimalSI (`1k`).
pub fn format_binary(bytes: i64) -> String {
    if bytes.unsigned_abs() < 1024 {
        return format_decimal(i128::from(bytes), 0);
    }
    let mut value = bytes;
    let mut power = 0;
    while value % 1024 == 0 && power < BINARY_SUFFIXES.len() - 1 {
        value /= 1024;
        power += 1;
    }
    format!("{value}{}", BINARY_SUFFIXES[power])
}

/// `Quantity.MilliValue` (rounded up) of a quantity string, None when it does not parse. Values
/// beyond i64 saturate. Only what the status needs: comparing a CPU quantity with a few millicores.
pub fn milli_value(q: &str) -> Option<i64> {
    let milli = scaled_value(q, -3)?;
    Some(i64::try_from(milli).unwrap_or(if milli < 0 { i64::MIN } else { i64::MAX }))
}

/// A quantity string as a whole number of `10^scale` units, rounded up (toward zero for negative
/// values), None when it does not parse; beyond i128 it saturates. At `scale` -9 this is the
/// quantity exactly as `ParseQuantity` keeps it (it rounds anything finer up to a nano).
fn scaled_value(q: &str, scale: i32) -> Option<i128> {
    let q = q.trim();
    let (negative, rest) = match q.as_bytes().first()? {
        b'-' => (true, &q[1..]),
        b'+' => (false, &q[1..]),
        _ => (false, q),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let (mut exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s => match DECIMAL_SUFFIXES.iter().find(|(_, sfx)| *sfx == s) {
            Some((e, _)) => (*e, 0),
            None => {
                let digits = s.strip_prefix(['e', 'E'])?;
                // `unsigned_abs`: `abs` of i32::MIN (`1e-2147483648`) overflows.
                (digits.parse::<i32>().ok().filter(|e| e.unsigned_abs() <= 1000)?, 0)
            }
        },
    };
    // Digits beyond 36 cannot change a value that saturates anyway; keep the arithmetic in i128.
    let digits: String = whole.chars().chain(fraction.chars()).collect();
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Some(0);
    }
    exp10 = exp10.checked_sub(i32::try_from(fraction.len()).ok()?)?;
    let kept = &significant[..significant.len().min(36)];
    exp10 = exp10.checked_add(i32::try_from(significant.len() - kept.len()).ok()?)?;
    let mut mantissa: i128 = kept.parse().ok()?;
    exp10 = exp10.checked_sub(scale)?;
    let saturate = |negative: bool| Some(if negative { i128::MIN } else { i128::MAX });
    for _ in 0..exp2 {
        mantissa = match mantissa.checked_mul(2) {
            Some(m) => m,
            None => return saturate(negative),
        };
    }
    if exp10 >= 0 {
        for _ in 0..exp10 {
            mantissa = match mantissa.checked_mul(10) {
                Some(m) => m,
                None => return saturate(negative),
            };
        }
    } else {
        let divisor = 10i128.checked_pow(exp10.unsigned_abs());
        mantissa = match divisor {
            // Rounded up, away from zero for positive values as MilliValue does.
            Some(d) if negative => mantissa / d,
            Some(d) => (mantissa + d - 1) / d,
            None => i128::from(!negative && mantissa > 0),
        };
    }
    Some(if negative { -mantissa } else { mantissa })
}

/// The `user`, `resources` and `allocatedResources` of a status converted from the runtime, as
/// `convertToAPIContainerStatuses` sets them (InPlacePodVerticalScaling GA in 1.35: for every
/// container the runtime reported). `allocated` is the container's resources in the spec (None:
/// none, BestEffort): what the kubelet's allocation holds for a pod it admitted.
pub fn set_runtime_fields(
    status: &mut ContainerStatus,
    runtime: &RuntimeContainerStatus,
    allocated: Option<&ResourceRequirements>,
    old: Option<&ContainerStatus>,
) {
    status.user = runtime.user.as_ref().map(api_user);
    // `convertToAPIContainerStatuses` copies it as it is; [`super::generate`] drops it unless the
    // ContainerStopSignals gate's equivalent is on.
    status.stop_signal = runtime.stop_signal.map(str::to_owned);
    status.resources = Some(status_resources(allocated, runtime, status, old));
    status.allocated_resources = allocated.and_then(|a| a.requests.clone());
}

/// A resource list of the API, by name.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Nanos in one unit.
const NANO: i128 = 1_000_000_000;

/// A quantity as a number (nanos: exact, as Go's `Quantity` holds it) and the format its string
/// was in (`Quantity.Format`), for the sums and maxima of pod-level resources. None when it does
/// not parse.
fn amount(q: &Quantity) -> Option<(i128, bool)> {
    let binary = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .iter()
        .any(|s| q.0.trim().ends_with(s));
    scaled_value(&q.0, -9).map(|nanos| (nanos, binary))
}

/// A sum written back as Go's `Quantity.String` writes it: in the format of the quantity it
/// started from, in DecimalSI when that is binary but the sum is not a whole number of bytes.
fn quantity(nanos: i128, binary: bool) -> Quantity {
    if binary
        && nanos % NANO == 0
        && let Ok(bytes) = i64::try_from(nanos / NANO)
    {
        return Quantity(format_binary(bytes));
    }
    Quantity(format_decimal(nanos, -9))
}

/// `addResourceList`: `add` added into `list`, name by name. A quantity that does not parse is
/// left out of a sum (it was refused by the apiserver's validation anyway).
fn add_list(list: &mut ResourceList, add: &ResourceList) {
    for (name, q) in add {
        match list.get(name) {
            None => {
                list.insert(name.clone(), q.clone());
            }
            Some(have) => {
                if let (Some((a, a_binary)), Some((b, b_binary))) = (amount(have), amount(q)) {
                    // A zero takes the format of what is added to it.
                    let binary = if a == 0 { b_binary } else { a_binary };
                    list.insert(name.clone(), quantity(a.saturating_add(b), binary));
                }
            }
        }
    }
}

/// `maxResourceList`: each of `other`'s quantities that is larger replaces `list`'s.
fn max_list(list: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        let larger = match list.get(name) {
            None => true,
            Some(have) => matches!((amount(q), amount(have)), (Some((a, _)), Some((b, _))) if a > b),
        };
        if larger {
            list.insert(name.clone(), q.clone());
        }
    }
}

/// `aggregateContainerResourcesByFn` over the spec (`resourcehelper`, component-helpers 1.37):
/// regular containers and sidecars add up; an init container counts with the sidecars started
/// before it, and the pod needs at least the largest of those.
fn aggregate(spec: &ApiPodSpec, of: impl Fn(&ResourceRequirements) -> Option<&ResourceList>) -> ResourceList {
    let list_of = |c: &ApiContainer| c.resources.as_deref().and_then(&of).cloned().unwrap_or_default();
    let mut result = ResourceList::new();
    for c in &spec.containers {
        add_list(&mut result, &list_of(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init = ResourceList::new();
    for c in &spec.init_containers {
        let own = list_of(c);
        let during = if c.is_restartable_init() {
            add_list(&mut result, &own);
            add_list(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut combined = own;
            add_list(&mut combined, &sidecars);
            combined
        };
        max_list(&mut init, &during);
    }
    max_list(&mut result, &init);
    result
}

/// `IsSupportedPodLevelResource`: cpu, memory and hugepages.
fn pod_level(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

/// The pod-level quantities of `list` plegd applies (supported ones only).
fn pod_level_of(list: Option<&ResourceList>) -> impl Iterator<Item = (&String, &Quantity)> {
    list.into_iter().flatten().filter(|(name, _)| pod_level(name))
}

/// `resourcehelper.PodRequests` (PodLevelResources on, no DRA): the containers' requests
/// aggregated, pod-level requests where set, plus the pod's overhead.
pub fn pod_requests(spec: &ApiPodSpec) -> ResourceList {
    let mut requests = aggregate(spec, |r| r.requests.as_ref());
    let pod = spec.resources.as_deref();
    for (name, q) in pod_level_of(pod.and_then(|r| r.requests.as_ref())) {
        requests.insert(name.clone(), q.clone());
    }
    if let Some(overhead) = &spec.overhead {
        add_list(&mut requests, overhead);
    }
    requests
}

/// `resourcehelper.PodLimits`: the containers' limits aggregated, pod-level limits where set
/// (when any pod-level resource is), plus the overhead on each limit that is not zero.
pub fn pod_limits(spec: &ApiPodSpec) -> ResourceList {
    let mut limits = aggregate(spec, |r| r.limits.as_ref());
    let pod = spec.resources.as_deref();
    let pod_level_set = pod_level_of(pod.and_then(|r| r.requests.as_ref()))
        .chain(pod_level_of(pod.and_then(|r| r.limits.as_ref())))
        .next()
        .is_some();
    if pod_level_set {
        for (name, q) in pod_level_of(pod.and_then(|r| r.limits.as_ref())) {
            limits.insert(name.clone(), q.clone());
        }
    }
    for (name, q) in spec.overhead.iter().flatten() {
        if let Some(limit) = limits.get(name)
            && amount(limit).is_some_and(|(v, _)| v != 0)
        {
            let mut add = ResourceList::new();
            add.insert(name.clone(), q.clone());
            add_list(&mut limits, &add);
        }
    }
    limits
}

/// The pod-level `status.resources` and `status.allocatedResources` (InPlacePodLevelResourcesVerticalScaling,
/// on in 1.37): `allocatedResources` is the pod's requests; `resources`, while the apiserver's copy
/// of the pod is not Running, its effective allocation (`getEffectiveAllocatedResources`). While it
/// runs, the kubelet reads `resources` back from the pod's cgroup, which the CRI does not report:
/// plegd keeps what `old` holds.
pub fn pod_status_resources(
    spec: &ApiPodSpec,
    old_phase: Option<&str>,
    old: Option<&ResourceRequirements>,
) -> (Option<ResourceRequirements>, Option<ResourceList>) {
    let requests = pod_requests(spec);
    let allocated = (!requests.is_empty()).then(|| requests.clone());
    if old_phase == Some("Running") {
        return (old.cloned(), allocated);
    }
    let limits = pod_limits(spec);
    let resources = ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..spec.resources.as_deref().cloned().unwrap_or_default()
    };
    (Some(resources), allocated)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStateWaiting};

    use super::*;
    use crate::kubecontainer::{RuntimeContainerResources, RuntimeLinuxContainerUser};

    #[test]
    fn quantities_in_canonical_form() {
        for (milli, want) in [
            (0, "0"),
            (2, "2m"),
            (100, "100m"),
            (1000, "1"),
            (1500, "1500m"),
            (250_000, "250"),
            (2_000_000, "2k"),
        ] {
            assert_eq!(format_milli(milli), want, "{milli}m");
        }
        for (bytes, want) in [
            (0, "0"),
            (500, "500"),
            (1000, "1k"),
            (1024, "1Ki"),
            (1536, "1536"),
            (64 << 20, "64Mi"),
            (1_000_000, "1000000"),
            (3 << 30, "3Gi"),
            (1 << 62, "4Ei"),
            (i64::MAX, "9223372036854775807"),
        ] {
            assert_eq!(format_binary(bytes), want, "{bytes}");
        }
    }

    #[test]
    fn milli_values_round_up_and_never_panic() {
        for (q, want) in [
            ("100m", Some(100)),
            ("0.1", Some(100)),
            ("1", Some(1000)),
            ("1.5", Some(1500)),
            ("2k", Some(2_000_000)),
            ("1Ki", Some(1_024_000)),
            ("0.0001", Some(1)),
            ("1e-3", Some(1)),
            ("1E3", Some(1_000_000)),
            ("+5m", Some(5)),
            ("-5m", Some(-5)),
            ("000000000000000000000000000000000000000000000000010m", Some(10)),
            ("1Ei", Some(i64::MAX)),
            ("99999999999999999999999999999999999999999999", Some(i64::MAX)),
            ("1e1000", Some(i64::MAX)),
            ("1e-1000", Some(1)),
            ("0", Some(0)),
            ("", None),
            ("m", None),
            ("1.2.3", None),
            ("1x", None),
            ("1e", None),
            ("1e99999", None),
            // Exponents at i32's ends: `abs` of the lowest overflowed.
            ("1e-2147483648", None),
            ("1e2147483647", None),
            ("1E-2147483648", None),
            ("١٠٠m", None),
        ] {
            assert_eq!(milli_value(q), want, "{q:?}");
        }
    }

    /// `Quantity.Add` is exact (no rounding to millis) and keeps the first quantity's format (a
    /// zero's is the added one's);
    /// `String` writes binary sums that are not whole bytes in DecimalSI. Values from
    /// `resource.MustParse(a).Add(resource.MustParse(b))` in Go.
    #[test]
    fn sums_are_exact_as_go_adds_quantities() {
        let q = |s: &str| Quantity(s.to_owned());
        for (a, b, want) in [
            ("1n", "1n", "2n"),
            ("1u", "1m", "1001u"),
            ("100m", "1", "1100m"),
            ("0.5", "0.25", "750m"),
            ("1Mi", "1", "1048577"),
            ("1Gi", "500m", "1073741824500m"),
            ("1Mi", "1Mi", "2Mi"),
            ("512", "512", "1024"),
            ("0", "1Mi", "1Mi"),
            ("1", "1Ki", "1025"),
            ("0.0000000001", "0", "1n"),
        ] {
            let mut list = ResourceList::from([("cpu".to_owned(), q(a))]);
            add_list(&mut list, &ResourceList::from([("cpu".to_owned(), q(b))]));
            assert_eq!(list["cpu"], q(want), "{a} + {b}");
        }
        // A maximum compares exactly: 1m and 1000001n are the same number of millis rounded up.
        let mut list = ResourceList::from([("cpu".to_owned(), q("1000001n"))]);
        max_list(&mut list, &ResourceList::from([("cpu".to_owned(), q("1m"))]));
        assert_eq!(list["cpu"], q("1000001n"));
        max_list(&mut list, &ResourceList::from([("cpu".to_owned(), q("1000002n"))]));
        assert_eq!(list["cpu"], q("1000002n"));
    }

    fn requirements(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> ResourceRequirements {
        let list = |items: &[(&str, &str)]| {
            (!items.is_empty()).then(|| {
                items
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        ResourceRequirements {
            limits: list(limits),
            requests: list(requests),
            claims: None,
        }
    }

    fn runtime(state: RuntimeContainerState, applied: Option<RuntimeContainerResources>) -> RuntimeContainerStatus {
        RuntimeContainerStatus {
            id: "c1".into(),
            sandbox_id: String::new(),
            name: "app".into(),
            state,
            created_at: None,
            started_at: None,
            finished_at: None,
            exit_code: 0,
            image: String::new(),
            image_id: String::new(),
            reason: String::new(),
            message: Default::default(),
            restart_count: 0,
            resources: applied,
            user: None,
            stop_signal: None,
            termination_source: None,
        }
    }

    fn api_status(id: &str, running: bool, resources: Option<ResourceRequirements>) -> ContainerStatus {
        ContainerStatus {
            name: "app".into(),
            container_id: Some(id.into()),
            state: Some(if running {
                ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..ContainerState::default()
                }
            } else {
                ContainerState {
                    waiting: Some(ContainerStateWaiting::default()),
                    ..ContainerState::default()
                }
            }),
            resources,
            ..ContainerStatus::default()
        }
    }

    /// Cases of upstream's `TestConvertToAPIContainerStatusesForResources` that CRI state can
    /// express (the allocation is the spec here; resize states are the kubelet's, not plegd's).
    #[test]
    fn status_resources_as_convert_container_status_resources() {
        let spec = requirements(
            &[("cpu", "1"), ("memory", "1Gi"), ("ephemeral-storage", "5Gi")],
            &[("cpu", "500m"), ("memory", "512Mi"), ("ephemeral-storage", "5Gi")],
        );
        let new = api_status("containerd://c1", true, None);

        // What the runtime applied wins for CPU and memory; ephemeral storage and the memory
        // request stay as allocated.
        let applied = RuntimeContainerResources {
            cpu_request_milli: Some(250),
            cpu_limit_milli: Some(750),
            memory_limit_bytes: Some(768 << 20),
        };
        let got = status_resources(
            Some(&spec),
            &runtime(RuntimeContainerState::Running, Some(applied)),
            &new,
            None,
        );
        assert_eq!(
            got,
            requirements(
                &[("cpu", "750m"), ("memory", "768Mi"), ("ephemeral-storage", "5Gi")],
                &[("cpu", "250m"), ("memory", "512Mi"), ("ephemeral-storage", "5Gi")],
            )
        );

        // Not running: the allocation as it is.
        for state in [
            RuntimeContainerState::Created,
            RuntimeContainerState::Exited,
            RuntimeContainerState::Unknown,
        ] {
            let got = status_resources(Some(&spec), &runtime(state, Some(applied)), &new, None);
            assert_eq!(got, spec, "{state:?}");
        }

        // Nothing reported, no old status: the allocation.
        let got = status_resources(Some(&spec), &runtime(RuntimeContainerState::Running, None), &new, None);
        assert_eq!(got, spec);

        // Nothing reported, the same container was running: its old values are kept.
        let old_values = requirements(&[("cpu", "900m"), ("memory", "900Mi")], &[("cpu", "400m")]);
        let old = api_status("containerd://c1", true, Some(old_values));
        let got = status_resources(
            Some(&spec),
            &runtime(RuntimeContainerState::Running, None),
            &new,
            Some(&old),
        );
        assert_eq!(
            got,
            requirements(
                &[("cpu", "900m"), ("memory", "900Mi"), ("ephemeral-storage", "5Gi")],
                &[("cpu", "400m"), ("memory", "512Mi"), ("ephemeral-storage", "5Gi")],
            )
        );
        // … but not those of another container, nor of one that was not running.
        let other = api_status("containerd://c0", true, old.resources.clone());
        let got = status_resources(
            Some(&spec),
            &runtime(RuntimeContainerState::Running, None),
            &new,
            Some(&other),
        );
        assert_eq!(got, spec);
        let waiting = api_status("containerd://c1", false, old.resources.clone());
        let got = status_resources(
            Some(&spec),
            &runtime(RuntimeContainerState::Running, None),
            &new,
            Some(&waiting),
        );
        assert_eq!(got, spec);

        // No limits in the spec: none in the status, whatever the runtime applied.
        let requests_only = requirements(&[], &[("cpu", "100m")]);
        let got = status_resources(
            Some(&requests_only),
            &runtime(RuntimeContainerState::Running, Some(applied)),
            &new,
            None,
        );
        assert_eq!(got, requirements(&[], &[("cpu", "250m")]));

        // No resources at all (BestEffort): `{}`.
        let got = status_resources(
            None,
            &runtime(RuntimeContainerState::Running, Some(applied)),
            &new,
            None,
        );
        assert_eq!(got, ResourceRequirements::default());
    }

    /// Upstream's minimum-shares and minimum-quota cases: at or below the kernel's floor on both
    /// sides, the allocated value stays.
    #[test]
    fn cpu_at_the_kernel_floor_keeps_the_allocated_value() {
        let new = api_status("containerd://c1", true, None);
        let floor = RuntimeContainerResources {
            cpu_request_milli: Some(2),
            cpu_limit_milli: Some(10),
            memory_limit_bytes: None,
        };
        let spec = requirements(&[("cpu", "5m")], &[("cpu", "1m")]);
        let got = status_resources(
            Some(&spec),
            &runtime(RuntimeContainerState::Running, Some(floor)),
            &new,
            None,
        );
        assert_eq!(got, spec);
        // The allocation above the floor: the runtime's value is written.
        let spec = requirements(&[("cpu", "20m")], &[("cpu", "5m")]);
        let got = status_resources(
            Some(&spec),
            &runtime(RuntimeContainerState::Running, Some(floor)),
            &new,
            None,
        );
        assert_eq!(got, requirements(&[("cpu", "10m")], &[("cpu", "2m")]));
        // The runtime above the floor: its value is written.
        let spec = requirements(&[("cpu", "5m")], &[("cpu", "1m")]);
        let above = RuntimeContainerResources {
            cpu_request_milli: Some(3),
            cpu_limit_milli: Some(11),
            memory_limit_bytes: None,
        };
        let got = status_resources(
            Some(&spec),
            &runtime(RuntimeContainerState::Running, Some(above)),
            &new,
            None,
        );
        assert_eq!(got, requirements(&[("cpu", "11m")], &[("cpu", "3m")]));
    }

    #[test]
    fn user_as_convert_container_status_user() {
        let user = RuntimeContainerUser {
            linux: Some(RuntimeLinuxContainerUser {
                uid: 0,
                gid: 0,
                supplemental_groups: vec![0, 1, 2, 3, 4, 6, 10, 11, 20, 26, 27],
            }),
        };
        let got = api_user(&user);
        let linux = got.linux.expect("linux");
        assert_eq!((linux.uid, linux.gid), (0, 0));
        assert_eq!(
            linux.supplemental_groups.as_deref(),
            Some(&[0, 1, 2, 3, 4, 6, 10, 11, 20, 26, 27][..])
        );
        assert_eq!(
            api_user(&RuntimeContainerUser { linux: None }),
            ContainerUser { linux: None }
        );
    }
}
