// Pod status validation for the test apiserver.
//
// This follows kubernetes/kubernetes pkg/apis/core/validation/validation.go:
// ValidatePodStatusUpdate and the functions it calls. It is a port of the
// subset a status writer (the kubelet, or plegd) can break, so that a write
// rejected here is rejected with the field path and message a real
// kube-apiserver would give.
//
// k8s.io/kubernetes is not available to this server, so the logic runs on the
// k8s.io/api/core/v1 types, which this server uses as its internal types.
//
// Upstream text this was checked against: validation.go as stored for
// kubernetes/kubernetes (a pre-1.33 commit) and a fork at the 1.33/1.34 level
// (natasha41575/kubernetes), plus pkg/api/v1/pod/util.go ContainerShouldRestart
// (1.34). Not confirmed against 1.35/1.36 text:
//   - how ValidateContainerStateTransition / ValidateInitContainerStateTransition
//     consult the per-container restartPolicy / restartPolicyRules
//     (ContainerRestartRules, kubernetes#132642) and RestartAllContainers
//     (kubernetes#134345); the rules below follow ContainerShouldRestart and keep
//     the upstream error path and message;
//   - checks for status fields newer than those texts (pod-level
//     allocatedResources/resources, extendedResourceClaimStatus,
//     nodeAllocatableResourceClaimStatuses, allocatedResourcesStatus messages);
//     none of them are validated here.
//
// Left out on purpose: ObjectMeta and pod-specific annotation checks (the
// caller's job). Upstream does not validate times, resource quantities in
// container statuses, duplicate condition types, or that container status
// names match containers of the spec (see the note in ValidatePodStatusUpdate
// and kubernetes#124918), and neither does this file.
package main

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// validatePodStatusUpdate ports ValidatePodStatusUpdate (status part only).
func validatePodStatusUpdate(newPod, oldPod *corev1.Pod) field.ErrorList {
	fldPath := field.NewPath("status")
	allErrs := validatePodConditions(newPod.Status.Conditions, fldPath.Child("conditions"))

	if newPod.Spec.NodeName != oldPod.Spec.NodeName {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("nodeName"), "may not be changed directly"))
	}

	if newPod.Status.NominatedNodeName != oldPod.Status.NominatedNodeName && len(newPod.Status.NominatedNodeName) > 0 {
		// upstream: ValidateNodeName == apimachineryvalidation.NameIsDNSSubdomain
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(newPod.Status.NominatedNodeName, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nominatedNodeName"), newPod.Status.NominatedNodeName, msg))
		}
	}

	if newPod.Status.ObservedGeneration < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("observedGeneration"), newPod.Status.ObservedGeneration, "must be a non-negative integer"))
	}

	// Pod QoS is immutable
	allErrs = append(allErrs, apimachineryvalidation.ValidateImmutableField(newPod.Status.QOSClass, oldPod.Status.QOSClass, fldPath.Child("qosClass"))...)

	// If pod should not restart, make sure the status update does not transition
	// any terminated containers to a non-terminated state.
	spec := &oldPod.Spec
	allErrs = append(allErrs, validateContainerStateTransition(newPod.Status.ContainerStatuses, oldPod.Status.ContainerStatuses, fldPath.Child("containerStatuses"), spec)...)
	allErrs = append(allErrs, validateInitContainerStateTransition(newPod.Status.InitContainerStatuses, oldPod.Status.InitContainerStatuses, fldPath.Child("initContainerStatuses"), spec)...)
	// The kubelet will never restart ephemeral containers, so treat them like they have an implicit RestartPolicyNever.
	allErrs = append(allErrs, validateStateTransition(newPod.Status.EphemeralContainerStatuses, oldPod.Status.EphemeralContainerStatuses, fldPath.Child("ephemeralContainerStatuses"), corev1.RestartPolicyNever, nil)...)
	allErrs = append(allErrs, validatePodResourceClaimStatuses(newPod.Status.ResourceClaimStatuses, newPod.Spec.ResourceClaims, fldPath.Child("resourceClaimStatuses"))...)

	allErrs = append(allErrs, validatePodIPs(newPod)...)
	allErrs = append(allErrs, validateHostIPs(newPod)...)

	allErrs = append(allErrs, validateContainerStatusUsers(newPod.Status.ContainerStatuses, fldPath.Child("containerStatuses"), newPod.Spec.OS)...)
	allErrs = append(allErrs, validateContainerStatusUsers(newPod.Status.InitContainerStatuses, fldPath.Child("initContainerStatuses"), newPod.Spec.OS)...)
	allErrs = append(allErrs, validateContainerStatusUsers(newPod.Status.EphemeralContainerStatuses, fldPath.Child("ephemeralContainerStatuses"), newPod.Spec.OS)...)

	allErrs = append(allErrs, validateContainerStatusAllocatedResourcesStatus(newPod.Status.ContainerStatuses, fldPath.Child("containerStatuses"), newPod.Spec.Containers)...)
	allErrs = append(allErrs, validateContainerStatusAllocatedResourcesStatus(newPod.Status.InitContainerStatuses, fldPath.Child("initContainerStatuses"), newPod.Spec.InitContainers)...)
	// ephemeral containers are not allowed to have resources allocated
	allErrs = append(allErrs, validateContainerStatusNoAllocatedResourcesStatus(newPod.Status.EphemeralContainerStatuses, fldPath.Child("ephemeralContainerStatuses"))...)

	return allErrs
}

// validatePodConditions ports validatePodConditions. The "Type" (capital T) in
// the path is upstream's. Upstream does not reject duplicate condition types.
func validatePodConditions(conditions []corev1.PodCondition, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	systemConditions := sets.New(corev1.PodScheduled, corev1.PodReady, corev1.PodInitialized)
	for i, condition := range conditions {
		if condition.ObservedGeneration < 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i).Child("observedGeneration"), condition.ObservedGeneration, "must be a non-negative integer"))
		}
		if systemConditions.Has(condition.Type) {
			continue
		}
		// upstream: ValidateQualifiedName
		for _, msg := range validation.IsQualifiedName(string(condition.Type)) {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i).Child("Type"), string(condition.Type), msg).WithOrigin("format=qualified-name"))
		}
	}
	return allErrs
}

// validateContainerStateTransition ports ValidateContainerStateTransition for
// regular containers.
func validateContainerStateTransition(newStatuses, oldStatuses []corev1.ContainerStatus, fldPath *field.Path, podSpec *corev1.PodSpec) field.ErrorList {
	if allContainersCouldRestart(podSpec) {
		return nil
	}
	return validateStateTransition(newStatuses, oldStatuses, fldPath, podSpec.RestartPolicy, podSpec.Containers)
}

// validateInitContainerStateTransition ports ValidateInitContainerStateTransition.
// Sidecars (restartPolicy Always) are exempt through containerRestartsAfter.
func validateInitContainerStateTransition(newStatuses, oldStatuses []corev1.ContainerStatus, fldPath *field.Path, podSpec *corev1.PodSpec) field.ErrorList {
	if allContainersCouldRestart(podSpec) {
		return nil
	}
	return validateStateTransition(newStatuses, oldStatuses, fldPath, podSpec.RestartPolicy, podSpec.InitContainers)
}

// validateStateTransition is the loop shared by the two functions above: a
// container whose old status is terminated and that will not be restarted may
// not have a non-terminated new status. As upstream, the index in the path is
// the index in the old statuses.
func validateStateTransition(newStatuses, oldStatuses []corev1.ContainerStatus, fldPath *field.Path, restartPolicy corev1.RestartPolicy, containers []corev1.Container) field.ErrorList {
	allErrs := field.ErrorList{}
	// If we should always restart, containers are allowed to leave the terminated state
	if restartPolicy == corev1.RestartPolicyAlways {
		return allErrs
	}
	for i, oldStatus := range oldStatuses {
		// Skip any container that is not terminated
		if oldStatus.State.Terminated == nil {
			continue
		}
		exitCode := oldStatus.State.Terminated.ExitCode
		// Skip any container that failed but is allowed to restart
		if exitCode != 0 && restartPolicy == corev1.RestartPolicyOnFailure {
			continue
		}
		// Skip any container its own restart policy or rules restart
		// (sidecar init containers included).
		if c := containerNamed(containers, oldStatus.Name); c != nil && containerRestartsAfter(c, exitCode) {
			continue
		}
		for _, newStatus := range newStatuses {
			if oldStatus.Name == newStatus.Name && newStatus.State.Terminated == nil {
				allErrs = append(allErrs, field.Forbidden(fldPath.Index(i).Child("state"), "may not be transitioned to non-terminated state"))
			}
		}
	}
	return allErrs
}

func containerNamed(containers []corev1.Container, name string) *corev1.Container {
	for i := range containers {
		if containers[i].Name == name {
			return &containers[i]
		}
	}
	return nil
}

// containerRestartsAfter is the container-level part of pkg/api/v1/pod/util.go
// ContainerShouldRestart: the first restartPolicyRules entry whose exitCodes
// match decides if its action is Restart; otherwise the container's own
// restartPolicy applies. A container without its own restartPolicy falls back
// to the pod's policy, which the caller has already applied.
func containerRestartsAfter(c *corev1.Container, exitCode int32) bool {
	if c.RestartPolicy == nil {
		return false
	}
	for _, rule := range c.RestartPolicyRules {
		if rule.ExitCodes == nil {
			continue
		}
		in := false
		for _, v := range rule.ExitCodes.Values {
			in = in || v == exitCode
		}
		matched := (rule.ExitCodes.Operator == corev1.ContainerRestartRuleOnExitCodesOpIn && in) ||
			(rule.ExitCodes.Operator == corev1.ContainerRestartRuleOnExitCodesOpNotIn && !in)
		if matched {
			if rule.Action == corev1.ContainerRestartRuleActionRestart {
				return true
			}
			break
		}
	}
	switch *c.RestartPolicy {
	case corev1.ContainerRestartPolicyAlways:
		return true
	case corev1.ContainerRestartPolicyOnFailure:
		return exitCode != 0
	}
	return false
}

// allContainersCouldRestart follows pkg/api/v1/pod/util.go AllContainersCouldRestart:
// a pod where some container has a RestartAllContainers rule may restart every
// container, so no terminated state is final (unconfirmed for the apiserver).
func allContainersCouldRestart(podSpec *corev1.PodSpec) bool {
	for _, list := range [][]corev1.Container{podSpec.InitContainers, podSpec.Containers} {
		for _, c := range list {
			for _, rule := range c.RestartPolicyRules {
				if rule.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
}

// validatePodResourceClaimStatuses ports validatePodResourceClaimStatuses.
func validatePodResourceClaimStatuses(statuses []corev1.PodResourceClaimStatus, podClaims []corev1.PodResourceClaim, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	claimNames := sets.New[string]()
	for i, status := range statuses {
		idxPath := fldPath.Index(i)
		found := false
		for _, podClaim := range podClaims {
			found = found || podClaim.Name == status.Name
		}
		if !found {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("name"), status.Name, "must match the name of an entry in `spec.resourceClaims`"))
		}
		if claimNames.Has(status.Name) {
			allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), status.Name))
		} else {
			claimNames.Insert(status.Name)
		}
		if status.ResourceClaimName != nil {
			for _, detail := range apimachineryvalidation.NameIsDNSSubdomain(*status.ResourceClaimName, false) {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("name"), status.ResourceClaimName, detail))
			}
		}
	}
	return allErrs
}

// validatePodIPs ports validatePodIPs. Upstream does not compare status.podIP
// with podIPs[0] here.
func validatePodIPs(pod *corev1.Pod) field.ErrorList {
	allErrs := field.ErrorList{}
	podIPsField := field.NewPath("status", "podIPs")

	// all PodIPs must be valid IPs
	for i, podIP := range pod.Status.PodIPs {
		allErrs = append(allErrs, validation.IsValidIP(podIPsField.Index(i), podIP.IP)...)
	}

	if len(pod.Status.PodIPs) > 1 {
		podIPs := make([]string, 0, len(pod.Status.PodIPs))
		for _, podIP := range pod.Status.PodIPs {
			podIPs = append(podIPs, podIP.IP)
		}
		allErrs = append(allErrs, validateDualStack(podIPsField, podIPs, pod.Status.PodIPs)...)

		// There should be no duplicates in list of Pod.PodIPs
		seen := sets.Set[string]{}
		for i, podIP := range pod.Status.PodIPs {
			if seen.Has(podIP.IP) {
				allErrs = append(allErrs, field.Duplicate(podIPsField.Index(i), podIP))
			}
			seen.Insert(podIP.IP)
		}
	}
	return allErrs
}

// validateHostIPs ports validateHostIPs.
func validateHostIPs(pod *corev1.Pod) field.ErrorList {
	allErrs := field.ErrorList{}
	if len(pod.Status.HostIPs) == 0 {
		return allErrs
	}
	hostIPsField := field.NewPath("status", "hostIPs")

	// hostIP must be equal to hostIPs[0].IP
	if pod.Status.HostIP != pod.Status.HostIPs[0].IP {
		allErrs = append(allErrs, field.Invalid(hostIPsField.Index(0).Child("ip"), pod.Status.HostIPs[0].IP, "must be equal to `hostIP`"))
	}

	// all HostIPs must be valid IPs
	for i, hostIP := range pod.Status.HostIPs {
		allErrs = append(allErrs, validation.IsValidIP(hostIPsField.Index(i), hostIP.IP)...)
	}

	if len(pod.Status.HostIPs) > 1 {
		seen := sets.Set[string]{}
		hostIPs := make([]string, 0, len(pod.Status.HostIPs))
		// There should be no duplicates in list of Pod.HostIPs
		for i, hostIP := range pod.Status.HostIPs {
			hostIPs = append(hostIPs, hostIP.IP)
			if seen.Has(hostIP.IP) {
				allErrs = append(allErrs, field.Duplicate(hostIPsField.Index(i), hostIP))
			}
			seen.Insert(hostIP.IP)
		}
		allErrs = append(allErrs, validateDualStack(hostIPsField, hostIPs, pod.Status.HostIPs)...)
	}
	return allErrs
}

// validateDualStack is the family check shared by validatePodIPs and validateHostIPs.
func validateDualStack(fldPath *field.Path, ips []string, value interface{}) field.ErrorList {
	allErrs := field.ErrorList{}
	dualStack, err := netutils.IsDualStackIPStrings(ips)
	if err != nil {
		allErrs = append(allErrs, field.InternalError(fldPath, fmt.Errorf("failed to check for dual stack with error:%v", err)))
	}
	// We only support one from each IP family (i.e. max two IPs in this list).
	if !dualStack || len(ips) > 2 {
		allErrs = append(allErrs, field.Invalid(fldPath, value, "may specify no more than one IP for each IP family"))
	}
	return allErrs
}

// validateContainerStatusUsers ports validateContainerStatusUsers and validateLinuxContainerUser.
func validateContainerStatusUsers(containerStatuses []corev1.ContainerStatus, fldPath *field.Path, podOS *corev1.PodOS) field.ErrorList {
	allErrors := field.ErrorList{}
	osName := corev1.Linux
	if podOS != nil {
		osName = podOS.Name
	}
	for i, containerStatus := range containerStatuses {
		if containerStatus.User == nil {
			continue
		}
		user := containerStatus.User.Linux
		userPath := fldPath.Index(i).Child("linux")
		switch osName {
		case corev1.Windows:
			if user != nil {
				allErrors = append(allErrors, field.Forbidden(userPath, "cannot be set for a windows pod"))
			}
		case corev1.Linux:
			if user == nil {
				continue
			}
			for _, msg := range validation.IsValidUserID(user.UID) {
				allErrors = append(allErrors, field.Invalid(userPath.Child("uid"), user.UID, msg))
			}
			for _, msg := range validation.IsValidGroupID(user.GID) {
				allErrors = append(allErrors, field.Invalid(userPath.Child("gid"), user.GID, msg))
			}
			for g, gid := range user.SupplementalGroups {
				for _, msg := range validation.IsValidGroupID(gid) {
					allErrors = append(allErrors, field.Invalid(userPath.Child("supplementalGroups").Index(g), gid, msg))
				}
			}
		}
	}
	return allErrors
}

// validateContainerStatusNoAllocatedResourcesStatus ports the function of that name.
func validateContainerStatusNoAllocatedResourcesStatus(containerStatuses []corev1.ContainerStatus, fldPath *field.Path) field.ErrorList {
	allErrors := field.ErrorList{}
	for i, containerStatus := range containerStatuses {
		if len(containerStatus.AllocatedResourcesStatus) == 0 {
			continue
		}
		allErrors = append(allErrors, field.Forbidden(fldPath.Index(i).Child("allocatedResourcesStatus"), "must not be specified in container status"))
	}
	return allErrors
}

// validateContainerStatusAllocatedResourcesStatus ports the function of that
// name: each allocatedResourcesStatus name must match one of the container's
// resource requests or claims (statuses of unknown containers are ignored, as
// upstream, kubernetes#124915); health must be a known value; resource IDs unique.
func validateContainerStatusAllocatedResourcesStatus(containerStatuses []corev1.ContainerStatus, fldPath *field.Path, containers []corev1.Container) field.ErrorList {
	allErrors := field.ErrorList{}
	supportedHealth := sets.New(corev1.ResourceHealthStatusHealthy, corev1.ResourceHealthStatusUnhealthy, corev1.ResourceHealthStatusUnknown)
	for i, containerStatus := range containerStatuses {
		container := containerNamed(containers, containerStatus.Name)
		for j, allocated := range containerStatus.AllocatedResourcesStatus {
			allocPath := fldPath.Index(i).Child("allocatedResourcesStatus").Index(j)
			if container != nil {
				found := false
				var errorStr string
				if strings.HasPrefix(string(allocated.Name), "claim:") {
					errorStr = "must match one of the container's resource claims in a format 'claim:<claimName>/<request>' or 'claim:<claimName>' if request is empty"
					for _, c := range container.Resources.Claims {
						name := "claim:" + c.Name
						if c.Request != "" {
							name += "/" + c.Request
						}
						found = found || name == string(allocated.Name)
					}
				} else {
					errorStr = "must match one of the container's resource requests"
					_, found = container.Resources.Requests[allocated.Name]
				}
				if !found {
					allErrors = append(allErrors, field.Invalid(allocPath.Child("name"), allocated.Name, errorStr))
				}
			}

			uniqueResources := sets.New[corev1.ResourceID]()
			for k, r := range allocated.Resources {
				if !supportedHealth.Has(r.Health) {
					allErrors = append(allErrors, field.NotSupported(allocPath.Child("resources").Index(k).Child("health"), r.Health, sets.List(supportedHealth)))
				}
				if uniqueResources.Has(r.ResourceID) {
					allErrors = append(allErrors, field.Duplicate(allocPath.Child("resources").Index(k).Child("resourceID"), r.ResourceID))
				} else {
					uniqueResources.Insert(r.ResourceID)
				}
			}
		}
	}
	return allErrors
}
