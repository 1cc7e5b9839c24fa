// The pod registry: a port of kubernetes/kubernetes pkg/registry/core/pod/strategy.go (podStrategy,
// podStatusStrategy, GetAttrs/ToSelectableFields, CheckGracefulDelete) and
// pkg/registry/core/pod/storage/storage.go (the store and its status subresource), onto k8s.io/api's
// core/v1 types. The defaults a pod gets on create follow pkg/apis/core/v1/defaults.go
// (SetDefaults_Pod, SetDefaults_PodSpec, SetDefaults_Container) for the fields a status writer
// reads; the QoS class follows pkg/apis/core/helper/qos/qos.go (GetPodQOS) for requests and limits
// of containers. Left out: the ephemeral containers, resize, binding, eviction and log/exec
// subresources, feature-gated field dropping (every field is kept), and pod spec validation (the
// spec comes from tests).
package main

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

type podStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

var podStrategyInstance = podStrategy{scheme, names.SimpleNameGenerator}

func (podStrategy) NamespaceScoped() bool { return true }

// GetResetFields: a write to pods may not change the status.
func (podStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

func (podStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	pod := obj.(*corev1.Pod)
	pod.Generation = 1
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: podQOS(pod)}
}

func (podStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	newPod.Status = oldPod.Status
	updatePodGeneration(newPod, oldPod)
}

func updatePodGeneration(newPod, oldPod *corev1.Pod) {
	if !apiequality.Semantic.DeepEqual(newPod.Spec, oldPod.Spec) {
		newPod.Generation++
	}
}

func (podStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	pod := obj.(*corev1.Pod)
	var errs field.ErrorList
	if len(pod.Spec.Containers) == 0 {
		errs = append(errs, field.Required(field.NewPath("spec", "containers"), ""))
	}
	return errs
}

func (podStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }
func (podStrategy) Canonicalize(obj runtime.Object)                                    {}
func (podStrategy) AllowCreateOnUpdate() bool                                          { return false }
func (podStrategy) AllowUnconditionalUpdate() bool                                     { return true }

func (podStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	var errs field.ErrorList
	if oldPod.Spec.NodeName != "" && newPod.Spec.NodeName != oldPod.Spec.NodeName {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "nodeName"), "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"))
	}
	return errs
}

func (podStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }

// CheckGracefulDelete: a bound pod that is not terminal is deleted gracefully (its
// deletionTimestamp set, the object kept) unless the grace period is 0; an unbound or terminal one
// at once.
func (podStrategy) CheckGracefulDelete(ctx context.Context, obj runtime.Object, options *metav1.DeleteOptions) bool {
	if options == nil {
		return false
	}
	pod := obj.(*corev1.Pod)
	period := int64(0)
	if options.GracePeriodSeconds != nil {
		period = *options.GracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	if len(pod.Spec.NodeName) == 0 {
		period = 0
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		period = 0
	}
	if period < 0 {
		period = 1
	}
	options.GracePeriodSeconds = &period
	return true
}

type podStatusStrategy struct{ podStrategy }

// GetResetFields: a status write may not change the spec, the deletion timestamp or the owners.
func (podStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"v1": fieldpath.NewSet(
			fieldpath.MakePathOrDie("spec"),
			fieldpath.MakePathOrDie("metadata", "deletionTimestamp"),
			fieldpath.MakePathOrDie("metadata", "ownerReferences"),
		),
	}
}

func (podStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newPod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	newPod.Spec = oldPod.Spec
	newPod.DeletionTimestamp = nil
	newPod.OwnerReferences = oldPod.OwnerReferences
	if newPod.Status.QOSClass == "" {
		newPod.Status.QOSClass = oldPod.Status.QOSClass
	}
	preserveOldObservedGeneration(newPod, oldPod)
}

// preserveOldObservedGeneration: a status write that leaves observedGeneration out (of the status
// or of a condition) keeps the old value.
func preserveOldObservedGeneration(newPod, oldPod *corev1.Pod) {
	if newPod.Status.ObservedGeneration == 0 {
		newPod.Status.ObservedGeneration = oldPod.Status.ObservedGeneration
	}
	old := map[corev1.PodConditionType][]int64{}
	for _, c := range oldPod.Status.Conditions {
		old[c.Type] = append(old[c.Type], c.ObservedGeneration)
	}
	for i, c := range newPod.Status.Conditions {
		generation := int64(0)
		if gens := old[c.Type]; len(gens) > 0 {
			generation = gens[0]
			old[c.Type] = gens[1:]
		}
		if c.ObservedGeneration == 0 {
			newPod.Status.Conditions[i].ObservedGeneration = generation
		}
	}
}

func (podStatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validatePodStatusUpdate(obj.(*corev1.Pod), old.(*corev1.Pod))
}

func (podStatusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// podAttrs: the labels and the selectable fields of a pod (ToSelectableFields).
func podAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil, fmt.Errorf("not a pod")
	}
	set := fields.Set{
		"spec.nodeName":           pod.Spec.NodeName,
		"spec.restartPolicy":      string(pod.Spec.RestartPolicy),
		"spec.schedulerName":      pod.Spec.SchedulerName,
		"spec.serviceAccountName": pod.Spec.ServiceAccountName,
		"spec.hostNetwork":        strconv.FormatBool(pod.Spec.HostNetwork),
		"status.phase":            string(pod.Status.Phase),
		"status.nominatedNodeName": pod.Status.NominatedNodeName,
	}
	set["status.podIP"] = ""
	if len(pod.Status.PodIPs) > 0 {
		set["status.podIP"] = pod.Status.PodIPs[0].IP
	}
	return labels.Set(pod.Labels), generic.AddObjectMetaFieldsSet(set, &pod.ObjectMeta, true), nil
}

// The field selectors pods accept (pkg/apis/core/v1/conversion.go, AddFieldLabelConversionsForPod).
func addPodFieldLabels(s *runtime.Scheme) error {
	return s.AddFieldLabelConversionFunc(corev1.SchemeGroupVersion.WithKind("Pod"), func(label, value string) (string, string, error) {
		switch label {
		case "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
			"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
			"status.nominatedNodeName":
			return label, value, nil
		case "spec.host":
			return "spec.nodeName", value, nil
		default:
			return "", "", fmt.Errorf("field label not supported: %s", label)
		}
	})
}

// podStatusREST is the pods/status subresource: the pod store with the status strategy.
type podStatusREST struct{ store *genericregistry.Store }

func (r *podStatusREST) New() runtime.Object { return &corev1.Pod{} }
func (r *podStatusREST) Destroy()            {}
func (r *podStatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}
func (r *podStatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Subresources must never allow create on update.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}
func (r *podStatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}
func (r *podStatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

func newPodStorage(getter generic.RESTOptionsGetter) (*genericregistry.Store, *podStatusREST, error) {
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Pod{} },
		NewListFunc:               func() runtime.Object { return &corev1.PodList{} },
		PredicateFunc:             matchPod,
		DefaultQualifiedResource:  schema.GroupResource{Resource: "pods"},
		SingularQualifiedResource: schema.GroupResource{Resource: "pod"},
		CreateStrategy:            podStrategyInstance,
		UpdateStrategy:            podStrategyInstance,
		DeleteStrategy:            podStrategyInstance,
		ResetFieldsStrategy:       podStrategyInstance,
		ReturnDeletedObject:       true,
		TableConvertor:            podTableConvertor{},
	}
	options := &generic.StoreOptions{RESTOptions: getter, AttrFunc: podAttrs, TriggerFunc: map[string]storage.IndexerFunc{"spec.nodeName": nodeNameTrigger}}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, nil, err
	}
	statusStore := *store
	statusStrategy := podStatusStrategy{podStrategyInstance}
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy
	return store, &podStatusREST{store: &statusStore}, nil
}

func matchPod(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: podAttrs, IndexFields: []string{"spec.nodeName"}}
}

func nodeNameTrigger(obj runtime.Object) string { return obj.(*corev1.Pod).Spec.NodeName }

// setPodDefaults: the defaults of SetDefaults_Pod, SetDefaults_PodSpec and SetDefaults_Container
// that a status writer reads.
func setPodDefaults(pod *corev1.Pod) {
	spec := &pod.Spec
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	if spec.TerminationGracePeriodSeconds == nil {
		period := int64(corev1.DefaultTerminationGracePeriodSeconds)
		spec.TerminationGracePeriodSeconds = &period
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.EnableServiceLinks == nil {
		enable := corev1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &enable
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			setContainerDefaults(&list[i])
		}
	}
}

func setContainerDefaults(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	// A limit without a request requests the limit (SetDefaults_Pod).
	for name, limit := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; !ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[name] = limit.DeepCopy()
		}
	}
}

// podQOS: Guaranteed when every container limits CPU and memory to what it requests, BestEffort
// when none requests or limits either, Burstable otherwise.
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				request, hasRequest := c.Resources.Requests[name]
				limit, hasLimit := c.Resources.Limits[name]
				if hasRequest && !request.IsZero() {
					add(requests, name, request)
				}
				if hasLimit && !limit.IsZero() {
					add(limits, name, limit)
				}
				if !hasLimit || limit.IsZero() || (hasRequest && request.Cmp(limit) != 0) {
					guaranteed = false
				}
			}
		}
	}
	switch {
	case len(requests) == 0 && len(limits) == 0:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	default:
		return corev1.PodQOSBurstable
	}
}

func add(list corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	sum := list[name]
	sum.Add(q)
	list[name] = sum
}
