// The other resources plegd and its tests use, each on k8s.io/apiserver's generic registry with a
// plain strategy: namespaces (which the ValidatingAdmissionPolicy plugin reads), events.k8s.io
// events (which plegd publishes with --emit-events) and ValidatingAdmissionPolicies with their
// bindings (deploy/components/*/admission-policy*.yaml, enforced by the real plugin). Their defaults follow
// kubernetes/kubernetes pkg/apis/admissionregistration/v1/defaults.go; the table columns of
// `kubectl get pods` follow pkg/printers/internalversion/printers.go (printPod) for the columns it
// shows by default.
package main

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
)

// A resource served with a plain strategy.
type simpleResource struct {
	plural, singular string
	group            string
	namespaced       bool
	newFunc          func() runtime.Object
	newListFunc      func() runtime.Object
}

var (
	namespaceResource = simpleResource{"namespaces", "namespace", "", false,
		func() runtime.Object { return &corev1.Namespace{} }, func() runtime.Object { return &corev1.NamespaceList{} }}
	eventResource = simpleResource{"events", "event", eventsv1.GroupName, true,
		func() runtime.Object { return &eventsv1.Event{} }, func() runtime.Object { return &eventsv1.EventList{} }}
	policyResource = simpleResource{"validatingadmissionpolicies", "validatingadmissionpolicy", admissionregistrationv1.GroupName, false,
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicy{} },
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyList{} }}
	bindingResource = simpleResource{"validatingadmissionpolicybindings", "validatingadmissionpolicybinding", admissionregistrationv1.GroupName, false,
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{} },
		func() runtime.Object { return &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{} }}
)

type simpleStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	namespaced bool
}

func (s simpleStrategy) NamespaceScoped() bool                                    { return s.namespaced }
func (simpleStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object)   {}
func (simpleStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {}
func (simpleStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return nil
}
func (simpleStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }
func (simpleStrategy) Canonicalize(obj runtime.Object)                                    {}
func (simpleStrategy) AllowCreateOnUpdate() bool                                          { return false }
func (simpleStrategy) AllowUnconditionalUpdate() bool                                     { return true }
func (simpleStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return nil
}
func (simpleStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

func newSimpleStorage(getter generic.RESTOptionsGetter, r simpleResource) (*genericregistry.Store, error) {
	strategy := simpleStrategy{scheme, names.SimpleNameGenerator, r.namespaced}
	store := &genericregistry.Store{
		NewFunc:                   r.newFunc,
		NewListFunc:               r.newListFunc,
		DefaultQualifiedResource:  schema.GroupResource{Group: r.group, Resource: r.plural},
		SingularQualifiedResource: schema.GroupResource{Group: r.group, Resource: r.singular},
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		TableConvertor:            rest.NewDefaultTableConvertor(schema.GroupResource{Group: r.group, Resource: r.plural}),
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: getter, AttrFunc: objectMetaAttrs}); err != nil {
		return nil, err
	}
	return store, nil
}

func objectMetaAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	set := fields.Set{"metadata.name": accessor.GetName()}
	if accessor.GetNamespace() != "" {
		set["metadata.namespace"] = accessor.GetNamespace()
	}
	if event, ok := obj.(*eventsv1.Event); ok {
		set["regarding.name"] = event.Regarding.Name
		set["regarding.uid"] = string(event.Regarding.UID)
		set["reason"] = event.Reason
		set["type"] = event.Type
	}
	return labels.Set(accessor.GetLabels()), set, nil
}

func addEventFieldLabels(s *runtime.Scheme) error {
	return s.AddFieldLabelConversionFunc(eventsv1.SchemeGroupVersion.WithKind("Event"), func(label, value string) (string, string, error) {
		switch label {
		case "metadata.name", "metadata.namespace", "regarding.name", "regarding.uid", "reason", "type":
			return label, value, nil
		default:
			return "", "", fmt.Errorf("field label not supported: %s", label)
		}
	})
}

// addDefaults registers the defaulting functions the decoders apply.
func addDefaults(s *runtime.Scheme) {
	s.AddTypeDefaultingFunc(&corev1.Pod{}, func(obj interface{}) { setPodDefaults(obj.(*corev1.Pod)) })
	s.AddTypeDefaultingFunc(&admissionregistrationv1.ValidatingAdmissionPolicy{}, func(obj interface{}) {
		spec := &obj.(*admissionregistrationv1.ValidatingAdmissionPolicy).Spec
		if spec.FailurePolicy == nil {
			fail := admissionregistrationv1.Fail
			spec.FailurePolicy = &fail
		}
		setMatchResourcesDefaults(spec.MatchConstraints)
	})
	s.AddTypeDefaultingFunc(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, func(obj interface{}) {
		setMatchResourcesDefaults(obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding).Spec.MatchResources)
	})
}

// SetDefaults_MatchResources (and SetDefaults_NamedRuleWithOperations' scope).
func setMatchResourcesDefaults(m *admissionregistrationv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		equivalent := admissionregistrationv1.Equivalent
		m.MatchPolicy = &equivalent
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				all := admissionregistrationv1.AllScopes
				rules[i].Scope = &all
			}
		}
	}
}

// podTableConvertor: NAME, READY, STATUS, RESTARTS, AGE, as `kubectl get pods` shows them.
type podTableConvertor struct{}

var podColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Ready", Type: "string"},
	{Name: "Status", Type: "string"},
	{Name: "Restarts", Type: "string"},
	{Name: "Age", Type: "string"},
}

func (podTableConvertor) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: podColumns}
	var pods []corev1.Pod
	switch o := object.(type) {
	case *corev1.Pod:
		pods = []corev1.Pod{*o}
	case *corev1.PodList:
		pods = o.Items
		table.ResourceVersion = o.ResourceVersion
		table.Continue = o.Continue
		table.RemainingItemCount = o.RemainingItemCount
	default:
		return nil, fmt.Errorf("not a pod: %T", object)
	}
	if m, err := meta.ListAccessor(object); err == nil && table.ResourceVersion == "" {
		table.ResourceVersion = m.GetResourceVersion()
	}
	for i := range pods {
		pod := &pods[i]
		ready, status, restarts := podRow(pod)
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  []interface{}{pod.Name, ready, status, restarts, age(pod.CreationTimestamp)},
			Object: runtime.RawExtension{Object: pod},
		})
	}
	return table, nil
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// podRow: printPod's ready count, status reason and restarts, for regular containers and init
// containers (sidecars included in the ready count).
func podRow(pod *corev1.Pod) (string, string, string) {
	restarts := 0
	ready := 0
	total := len(pod.Spec.Containers)
	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	initializing := false
	for i, c := range pod.Status.InitContainerStatuses {
		restarts += int(c.RestartCount)
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case c.State.Running != nil && isSidecar(pod, c.Name):
			if c.Ready {
				ready++
			}
			total++
			continue
		case c.State.Terminated != nil:
			reason = "Init:" + c.State.Terminated.Reason
			if c.State.Terminated.Reason == "" {
				reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
			}
			initializing = true
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
			initializing = true
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
			initializing = true
		}
		break
	}
	if !initializing {
		running := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := pod.Status.ContainerStatuses[i]
			restarts += int(c.RestartCount)
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil && c.State.Terminated.Reason != "":
				reason = c.State.Terminated.Reason
			case c.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			case c.Ready && c.State.Running != nil:
				running = true
				ready++
			}
		}
		if reason == "Completed" && running {
			reason = "Running"
		}
	}
	if pod.DeletionTimestamp != nil {
		reason = "Terminating"
	}
	return fmt.Sprintf("%d/%d", ready, total), reason, fmt.Sprint(restarts)
}

func isSidecar(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	return false
}



