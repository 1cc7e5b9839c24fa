package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// statusTestPod is the old pod of every case: restartPolicy Never, an init
// container, a sidecar, two containers and one resource claim.
func statusTestPod() *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		Spec: corev1.PodSpec{
			NodeName:      "node-1",
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "init"},
				{Name: "sidecar", RestartPolicy: &always},
			},
			Containers: []corev1.Container{
				{Name: "app", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
					Claims:   []corev1.ResourceClaim{{Name: "gpu", Request: "one"}},
				}},
				{Name: "other"},
			},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu"}},
		},
		Status: corev1.PodStatus{QOSClass: corev1.PodQOSBurstable},
	}
}

func statusTerminated(name string, exitCode int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode}}}
}

func statusRunning(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func statusWaiting(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
}

func exitCodeRule(action corev1.ContainerRestartRuleAction, op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) corev1.ContainerRestartRule {
	return corev1.ContainerRestartRule{Action: action, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

func containerPolicy(p corev1.ContainerRestartPolicy) *corev1.ContainerRestartPolicy { return &p }

type statusCase struct {
	name   string
	old    func(*corev1.Pod) // applied to the old pod; the new pod starts as its copy
	update func(*corev1.Pod) // applied to the new pod only
	want   []string          // one substring per expected error, in order
}

func runStatusCases(t *testing.T, cases []statusCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			oldPod := statusTestPod()
			if tc.old != nil {
				tc.old(oldPod)
			}
			newPod := oldPod.DeepCopy()
			if tc.update != nil {
				tc.update(newPod)
			}
			errs := validatePodStatusUpdate(newPod, oldPod)
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %v, want %d: %q", len(errs), errs, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

func TestPodStatusConditions(t *testing.T) {
	runStatusCases(t, []statusCase{
		{name: "system and qualified custom types", update: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}, {Type: "example.com/Foo"}, {Type: corev1.DisruptionTarget}}
		}},
		{name: "duplicate types are not rejected upstream", update: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}, {Type: corev1.PodReady}}
		}},
		{name: "custom type not a qualified name", update: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}, {Type: "bad type!"}}
		}, want: []string{`status.conditions[1].Type: Invalid value: "bad type!": name part must consist of`}},
		{name: "negative condition observedGeneration", update: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, ObservedGeneration: -1}}
		}, want: []string{"status.conditions[0].observedGeneration: Invalid value: -1: must be a non-negative integer"}},
	})
}

func TestPodStatusScalarFields(t *testing.T) {
	runStatusCases(t, []statusCase{
		{name: "valid nominatedNodeName", update: func(p *corev1.Pod) { p.Status.NominatedNodeName = "node-2" }},
		{name: "invalid nominatedNodeName", update: func(p *corev1.Pod) { p.Status.NominatedNodeName = "Node_2" },
			want: []string{`status.nominatedNodeName: Invalid value: "Node_2": a lowercase RFC 1123 subdomain`}},
		{name: "unchanged invalid nominatedNodeName", old: func(p *corev1.Pod) { p.Status.NominatedNodeName = "Node_2" }},
		{name: "qosClass may not change", update: func(p *corev1.Pod) { p.Status.QOSClass = corev1.PodQOSGuaranteed },
			want: []string{`status.qosClass: Invalid value: "Guaranteed": field is immutable`}},
		{name: "negative observedGeneration", update: func(p *corev1.Pod) { p.Status.ObservedGeneration = -1 },
			want: []string{"status.observedGeneration: Invalid value: -1: must be a non-negative integer"}},
		{name: "nodeName may not change", update: func(p *corev1.Pod) { p.Spec.NodeName = "node-2" },
			want: []string{"status.nodeName: Forbidden: may not be changed directly"}},
		{name: "times and phase are free", update: func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodSucceeded
			p.Status.Message, p.Status.Reason = "done", "Completed"
		}},
	})
}

func TestPodStatusContainerStateTransition(t *testing.T) {
	const illegal = "Forbidden: may not be transitioned to non-terminated state"
	withStatuses := func(s ...corev1.ContainerStatus) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.ContainerStatuses = s }
	}
	oldTerminated := func(code int32, change func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{statusTerminated("app", code)}
			if change != nil {
				change(p)
			}
		}
	}
	onFailure := func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure }
	runStatusCases(t, []statusCase{
		{name: "Never: terminated to running", old: oldTerminated(0, nil), update: withStatuses(statusRunning("app")),
			want: []string{"status.containerStatuses[0].state: " + illegal}},
		{name: "Never: terminated to waiting", old: oldTerminated(1, nil), update: withStatuses(statusWaiting("app")),
			want: []string{"status.containerStatuses[0].state: " + illegal}},
		{name: "Never: terminated stays terminated", old: oldTerminated(1, nil), update: withStatuses(statusTerminated("app", 2))},
		{name: "Never: running to terminated", old: withStatuses(statusRunning("app")), update: withStatuses(statusTerminated("app", 0))},
		{name: "path index is the old status index",
			old:    withStatuses(statusRunning("other"), statusTerminated("app", 0)),
			update: withStatuses(statusRunning("app"), statusRunning("other")),
			want:   []string{"status.containerStatuses[1].state: " + illegal}},
		{name: "status of a container not in the spec is not checked upstream", update: withStatuses(statusRunning("ghost"))},
		{name: "OnFailure: failed container may restart", old: oldTerminated(1, onFailure), update: withStatuses(statusRunning("app"))},
		{name: "OnFailure: succeeded container may not restart", old: oldTerminated(0, onFailure), update: withStatuses(statusRunning("app")),
			want: []string{"status.containerStatuses[0].state: " + illegal}},
		{name: "Always: anything goes", old: oldTerminated(0, func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyAlways }),
			update: withStatuses(statusRunning("app"))},
		{name: "container restartPolicy OnFailure overrides pod Never, exit 1",
			old: oldTerminated(1, func(p *corev1.Pod) {
				p.Spec.Containers[0].RestartPolicy = containerPolicy(corev1.ContainerRestartPolicyOnFailure)
			}),
			update: withStatuses(statusRunning("app"))},
		{name: "container restartPolicy OnFailure, exit 0",
			old: oldTerminated(0, func(p *corev1.Pod) {
				p.Spec.Containers[0].RestartPolicy = containerPolicy(corev1.ContainerRestartPolicyOnFailure)
			}),
			update: withStatuses(statusRunning("app")),
			want:   []string{"status.containerStatuses[0].state: " + illegal}},
		{name: "container restartPolicy Always overrides pod Never",
			old: oldTerminated(0, func(p *corev1.Pod) {
				p.Spec.Containers[0].RestartPolicy = containerPolicy(corev1.ContainerRestartPolicyAlways)
			}),
			update: withStatuses(statusWaiting("app"))},
		{name: "restart rule In matches the exit code",
			old: oldTerminated(42, func(p *corev1.Pod) {
				p.Spec.Containers[0].RestartPolicy = containerPolicy(corev1.ContainerRestartPolicyNever)
				p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{exitCodeRule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpIn, 42)}
			}),
			update: withStatuses(statusRunning("app"))},
		{name: "restart rule In does not match the exit code",
			old: oldTerminated(1, func(p *corev1.Pod) {
				p.Spec.Containers[0].RestartPolicy = containerPolicy(corev1.ContainerRestartPolicyNever)
				p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{exitCodeRule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpIn, 42)}
			}),
			update: withStatuses(statusRunning("app")),
			want:   []string{"status.containerStatuses[0].state: " + illegal}},
		{name: "restart rule NotIn matches the exit code",
			old: oldTerminated(3, func(p *corev1.Pod) {
				p.Spec.Containers[0].RestartPolicy = containerPolicy(corev1.ContainerRestartPolicyNever)
				p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{exitCodeRule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpNotIn, 0)}
			}),
			update: withStatuses(statusRunning("app"))},
		{name: "rules are ignored without a container restartPolicy",
			old: oldTerminated(42, func(p *corev1.Pod) {
				p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{exitCodeRule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpIn, 42)}
			}),
			update: withStatuses(statusRunning("app")),
			want:   []string{"status.containerStatuses[0].state: " + illegal}},
		{name: "a RestartAllContainers rule in the pod lets every container restart",
			old: oldTerminated(0, func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusTerminated("init", 0)}
				p.Spec.Containers[1].RestartPolicy = containerPolicy(corev1.ContainerRestartPolicyNever)
				p.Spec.Containers[1].RestartPolicyRules = []corev1.ContainerRestartRule{exitCodeRule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 88)}
			}),
			update: func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{statusWaiting("app")}
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusRunning("init")}
			}},
		{name: "init container: terminated to running",
			old: func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusTerminated("init", 0)}
			},
			update: func(p *corev1.Pod) { p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusRunning("init")} },
			want:   []string{"status.initContainerStatuses[0].state: " + illegal}},
		{name: "sidecar init container may restart",
			old: func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusTerminated("init", 0), statusTerminated("sidecar", 0)}
			},
			update: func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusTerminated("init", 0), statusRunning("sidecar")}
			}},
		{name: "OnFailure: failed init container may restart",
			old: func(p *corev1.Pod) {
				onFailure(p)
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusTerminated("init", 1)}
			},
			update: func(p *corev1.Pod) { p.Status.InitContainerStatuses = []corev1.ContainerStatus{statusWaiting("init")} }},
		{name: "ephemeral containers never restart, even with restartPolicy Always",
			old: func(p *corev1.Pod) {
				p.Spec.RestartPolicy = corev1.RestartPolicyAlways
				p.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{statusTerminated("debug", 0)}
			},
			update: func(p *corev1.Pod) {
				p.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{statusRunning("debug")}
			},
			want: []string{"status.ephemeralContainerStatuses[0].state: " + illegal}},
	})
}

func TestPodStatusIPs(t *testing.T) {
	podIPs := func(ips ...string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.PodIPs = nil
			for _, ip := range ips {
				p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
			}
		}
	}
	hostIPs := func(hostIP string, ips ...string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.HostIP = hostIP
			p.Status.HostIPs = nil
			for _, ip := range ips {
				p.Status.HostIPs = append(p.Status.HostIPs, corev1.HostIP{IP: ip})
			}
		}
	}
	const family = "may specify no more than one IP for each IP family"
	runStatusCases(t, []statusCase{
		{name: "one pod IP", update: podIPs("10.0.0.1")},
		{name: "dual-stack pod IPs", update: podIPs("10.0.0.1", "fd00::1")},
		{name: "podIP differing from podIPs[0] is not checked upstream", update: func(p *corev1.Pod) {
			podIPs("10.0.0.1")(p)
			p.Status.PodIP = "10.0.0.9"
		}},
		{name: "invalid pod IP", update: podIPs("10.0.0.256"),
			want: []string{`status.podIPs[0]: Invalid value: "10.0.0.256": must be a valid IP address`}},
		{name: "non-canonical pod IP", update: podIPs("fd00:0::1"),
			want: []string{`status.podIPs[0]: Invalid value: "fd00:0::1": must be in canonical form ("fd00::1")`}},
		{name: "two IPv4 pod IPs", update: podIPs("10.0.0.1", "10.0.0.2"),
			want: []string{`status.podIPs: Invalid value: [{"ip":"10.0.0.1"},{"ip":"10.0.0.2"}]: ` + family}},
		{name: "three pod IPs", update: podIPs("10.0.0.1", "fd00::1", "10.0.0.2"),
			want: []string{"status.podIPs: Invalid value: [" + `{"ip":"10.0.0.1"},{"ip":"fd00::1"},{"ip":"10.0.0.2"}]: ` + family}},
		{name: "duplicate pod IP", update: podIPs("10.0.0.1", "10.0.0.1"),
			want: []string{"status.podIPs: Invalid value", `status.podIPs[1]: Duplicate value: {"ip":"10.0.0.1"}`}},
		{name: "hostIP matching hostIPs[0]", update: hostIPs("10.1.0.1", "10.1.0.1", "fd01::1")},
		{name: "hostIP without hostIPs is not checked upstream", update: hostIPs("10.1.0.1")},
		{name: "hostIP differing from hostIPs[0]", update: hostIPs("10.1.0.2", "10.1.0.1"),
			want: []string{"status.hostIPs[0].ip: Invalid value: \"10.1.0.1\": must be equal to `hostIP`"}},
		{name: "invalid host IP", update: hostIPs("node", "node"),
			want: []string{`status.hostIPs[0]: Invalid value: "node": must be a valid IP address`}},
		{name: "duplicate host IP", update: hostIPs("fd01::1", "fd01::1", "fd01::1"),
			want: []string{`status.hostIPs[1]: Duplicate value: {"ip":"fd01::1"}`, "status.hostIPs: Invalid value: [" + `{"ip":"fd01::1"},{"ip":"fd01::1"}]: ` + family}},
	})
}

func TestPodStatusContainerUsers(t *testing.T) {
	user := func(os corev1.OSName, uid, gid int64, groups ...int64) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			if os != "" {
				p.Spec.OS = &corev1.PodOS{Name: os}
			}
			s := statusRunning("app")
			s.User = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: uid, GID: gid, SupplementalGroups: groups}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{s}
		}
	}
	runStatusCases(t, []statusCase{
		{name: "valid linux user", update: user("", 1000, 1000, 2000)},
		{name: "negative uid", update: user("", -1, 0),
			want: []string{"status.containerStatuses[0].linux.uid: Invalid value: -1: must be between 0 and 2147483647, inclusive"}},
		{name: "negative supplemental group", update: user(corev1.Linux, 0, 0, 5, -2),
			want: []string{"status.containerStatuses[0].linux.supplementalGroups[1]: Invalid value: -2"}},
		{name: "linux user on a windows pod", update: user(corev1.Windows, 0, 0),
			want: []string{"status.containerStatuses[0].linux: Forbidden: cannot be set for a windows pod"}},
	})
}

func TestPodStatusAllocatedResourcesStatus(t *testing.T) {
	health := func(name string, rs ...corev1.ResourceHealth) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			s := statusRunning(name)
			s.AllocatedResourcesStatus = []corev1.ResourceStatus{{Name: "claim:gpu/one", Resources: rs}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{s}
		}
	}
	named := func(container string, name corev1.ResourceName) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			s := statusRunning(container)
			s.AllocatedResourcesStatus = []corev1.ResourceStatus{{Name: name}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{s}
		}
	}
	runStatusCases(t, []statusCase{
		{name: "requested resource", update: named("app", corev1.ResourceCPU)},
		{name: "claim with request", update: named("app", "claim:gpu/one")},
		{name: "resource not requested", update: named("app", corev1.ResourceMemory),
			want: []string{`status.containerStatuses[0].allocatedResourcesStatus[0].name: Invalid value: "memory": must match one of the container's resource requests`}},
		{name: "claim without its request", update: named("app", "claim:gpu"),
			want: []string{`status.containerStatuses[0].allocatedResourcesStatus[0].name: Invalid value: "claim:gpu": must match one of the container's resource claims`}},
		{name: "unknown container is ignored", update: named("ghost", corev1.ResourceMemory)},
		{name: "healthy and unhealthy devices", update: health("app",
			corev1.ResourceHealth{ResourceID: "dev-0", Health: corev1.ResourceHealthStatusHealthy},
			corev1.ResourceHealth{ResourceID: "dev-1", Health: corev1.ResourceHealthStatusUnhealthy})},
		{name: "unsupported health", update: health("app", corev1.ResourceHealth{ResourceID: "dev-0", Health: "Bad"}),
			want: []string{`status.containerStatuses[0].allocatedResourcesStatus[0].resources[0].health: Unsupported value: "Bad": supported values: "Healthy", "Unhealthy", "Unknown"`}},
		{name: "duplicate resource ID", update: health("app",
			corev1.ResourceHealth{ResourceID: "dev-0", Health: corev1.ResourceHealthStatusHealthy},
			corev1.ResourceHealth{ResourceID: "dev-0", Health: corev1.ResourceHealthStatusUnknown}),
			want: []string{`status.containerStatuses[0].allocatedResourcesStatus[0].resources[1].resourceID: Duplicate value: "dev-0"`}},
		{name: "ephemeral container may not have it", update: func(p *corev1.Pod) {
			s := statusRunning("debug")
			s.AllocatedResourcesStatus = []corev1.ResourceStatus{{Name: corev1.ResourceCPU}}
			p.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{s}
		}, want: []string{"status.ephemeralContainerStatuses[0].allocatedResourcesStatus: Forbidden: must not be specified in container status"}},
	})
}

func TestPodStatusResourceClaimStatuses(t *testing.T) {
	claims := func(s ...corev1.PodResourceClaimStatus) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.ResourceClaimStatuses = s }
	}
	name := func(s string) *string { return &s }
	runStatusCases(t, []statusCase{
		{name: "claim of the spec", update: claims(corev1.PodResourceClaimStatus{Name: "gpu", ResourceClaimName: name("pod-gpu-x7")})},
		{name: "claim not in the spec", update: claims(corev1.PodResourceClaimStatus{Name: "nope"}),
			want: []string{`status.resourceClaimStatuses[0].name: Invalid value: "nope": must match the name of an entry in ` + "`spec.resourceClaims`"}},
		{name: "duplicate claim", update: claims(corev1.PodResourceClaimStatus{Name: "gpu"}, corev1.PodResourceClaimStatus{Name: "gpu"}),
			want: []string{`status.resourceClaimStatuses[1].name: Duplicate value: "gpu"`}},
		{name: "invalid generated claim name", update: claims(corev1.PodResourceClaimStatus{Name: "gpu", ResourceClaimName: name("Bad_Name")}),
			want: []string{`status.resourceClaimStatuses[0].name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain`}},
	})
}
