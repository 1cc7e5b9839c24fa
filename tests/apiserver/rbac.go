// The RBAC authorizer, ported from kubernetes/kubernetes (not available as a library here):
//
//   - plugin/pkg/auth/authorizer/rbac/rbac.go: RBACAuthorizer.Authorize with its authorizingVisitor,
//     RBACAuthorizer.RulesFor, RuleAllows;
//   - pkg/apis/rbac/v1/evaluation_helpers.go: VerbMatches, APIGroupMatches, ResourceMatches (with "*"
//     and "*/subresource"), ResourceNameMatches, NonResourceURLMatches;
//   - pkg/registry/rbac/validation/rule.go: DefaultRuleResolver.VisitRulesFor, RulesFor (the
//     ruleAccumulator), GetRoleReferenceRules, appliesTo/appliesToUser for User, Group and
//     ServiceAccount subjects, and the binding describers that make up the "allowed by" reason;
//   - plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go: the ClusterRoles system:discovery,
//     system:basic-user and system:public-info-viewer and their ClusterRoleBindings, which
//     kube-apiserver always creates.
//
// Instead of informer listers, the roles and bindings are loaded once at start from YAML manifests
// (deploy/'s rbac*.yaml files). Left out: Authorize's klog.V(5) log of denials, aggregated ClusterRoles
// (aggregationRule), the escalation checks (ConfirmNoEscalation), the rest of the bootstrap policy
// and the RBAC REST API itself.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/yaml"
)

// rbacAuthorizer is RBACAuthorizer and DefaultRuleResolver in one, over a fixed set of objects.
type rbacAuthorizer struct {
	roles               map[string]*rbacv1.Role // by namespace/name
	roleBindings        []*rbacv1.RoleBinding
	clusterRoles        map[string]*rbacv1.ClusterRole
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// loadRBAC reads the Roles, ClusterRoles and their bindings from multi-document YAML files, after
// the bootstrap policy's discovery roles. Documents of other kinds are skipped.
func loadRBAC(paths []string) (*rbacAuthorizer, error) {
	a := &rbacAuthorizer{roles: map[string]*rbacv1.Role{}, clusterRoles: map[string]*rbacv1.ClusterRole{}}
	for i := range bootstrapClusterRoles {
		a.clusterRoles[bootstrapClusterRoles[i].Name] = &bootstrapClusterRoles[i]
	}
	for i := range bootstrapClusterRoleBindings {
		a.clusterRoleBindings = append(a.clusterRoleBindings, &bootstrapClusterRoleBindings[i])
	}
	for _, path := range paths {
		if err := a.loadFile(path); err != nil {
			return nil, fmt.Errorf("RBAC manifest %s: %w", path, err)
		}
	}
	return a, nil
}

func (a *rbacAuthorizer) loadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if err == io.EOF {
			return nil
		}
		if err == nil {
			err = a.addDocument(doc)
		}
		if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
	}
}

func (a *rbacAuthorizer) addDocument(doc []byte) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	if string(bytes.TrimSpace(js)) == "null" { // only comments
		return nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return err
	}
	var into interface{}
	switch tm.Kind {
	case "":
		return errors.New("no kind")
	case "Role":
		into = &rbacv1.Role{}
	case "RoleBinding":
		into = &rbacv1.RoleBinding{}
	case "ClusterRole":
		into = &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		into = &rbacv1.ClusterRoleBinding{}
	default:
		return nil // Namespace, ServiceAccount, ...: not the authorizer's
	}
	if tm.APIVersion != rbacv1.SchemeGroupVersion.String() {
		return fmt.Errorf("%s: apiVersion %q is not %s", tm.Kind, tm.APIVersion, rbacv1.SchemeGroupVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	meta := into.(metav1.Object)
	namespaced := tm.Kind == "Role" || tm.Kind == "RoleBinding"
	if meta.GetName() == "" || namespaced != (meta.GetNamespace() != "") {
		return fmt.Errorf("%s %q: needs a name, and a namespace if and only if namespaced", tm.Kind, meta.GetName())
	}
	key := meta.GetNamespace() + "/" + meta.GetName()
	switch o := into.(type) {
	case *rbacv1.Role:
		if a.roles[key] != nil {
			return fmt.Errorf("Role %q is already defined", key)
		}
		a.roles[key] = o
	case *rbacv1.ClusterRole:
		if a.clusterRoles[o.Name] != nil {
			return fmt.Errorf("ClusterRole %q is already defined", o.Name)
		}
		if o.AggregationRule != nil {
			return fmt.Errorf("ClusterRole %q: aggregationRule is not supported", o.Name)
		}
		a.clusterRoles[o.Name] = o
	case *rbacv1.RoleBinding:
		a.roleBindings = append(a.roleBindings, o)
	case *rbacv1.ClusterRoleBinding:
		if o.RoleRef.Kind != "ClusterRole" {
			return fmt.Errorf("ClusterRoleBinding %q: roleRef.kind must be ClusterRole", o.Name)
		}
		a.clusterRoleBindings = append(a.clusterRoleBindings, o)
	}
	return nil
}

// Authorize is RBACAuthorizer.Authorize (rbac.go).
func (a *rbacAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	visitor := &authorizingVisitor{requestAttributes: attrs}
	a.visitRulesFor(attrs.GetUser(), attrs.GetNamespace(), visitor.visit)
	if visitor.allowed {
		return authorizer.DecisionAllow, visitor.reason, nil
	}
	reason := ""
	if len(visitor.errors) > 0 {
		reason = fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(visitor.errors))
	}
	return authorizer.DecisionNoOpinion, reason, nil
}

// authorizingVisitor short-circuits once allowed, and collects any resolution errors encountered.
type authorizingVisitor struct {
	requestAttributes authorizer.Attributes
	allowed           bool
	reason            string
	errors            []error
}

func (v *authorizingVisitor) visit(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool {
	if rule != nil && ruleAllows(v.requestAttributes, rule) {
		v.allowed = true
		v.reason = fmt.Sprintf("RBAC: allowed by %s", source.String())
		return false
	}
	if err != nil {
		v.errors = append(v.errors, err)
	}
	return true
}

// RulesFor is RBACAuthorizer.RulesFor (rbac.go) over DefaultRuleResolver.RulesFor (rule.go), for
// SelfSubjectRulesReview.
func (a *rbacAuthorizer) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	var (
		resourceRules    []authorizer.ResourceRuleInfo
		nonResourceRules []authorizer.NonResourceRuleInfo
		errs             []error
	)
	a.visitRulesFor(u, namespace, func(_ fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool {
		if err != nil {
			errs = append(errs, err)
		}
		if rule == nil {
			return true
		}
		if len(rule.Resources) > 0 {
			resourceRules = append(resourceRules, &authorizer.DefaultResourceRuleInfo{
				Verbs: rule.Verbs, APIGroups: rule.APIGroups, Resources: rule.Resources, ResourceNames: rule.ResourceNames,
			})
		}
		if len(rule.NonResourceURLs) > 0 {
			nonResourceRules = append(nonResourceRules, &authorizer.DefaultNonResourceRuleInfo{
				Verbs: rule.Verbs, NonResourceURLs: rule.NonResourceURLs,
			})
		}
		return true
	})
	return resourceRules, nonResourceRules, false, utilerrors.NewAggregate(errs)
}

// visitRulesFor is DefaultRuleResolver.VisitRulesFor (rule.go): the rules of the ClusterRoleBindings
// that apply to the user, then those of the RoleBindings in the namespace.
func (a *rbacAuthorizer) visitRulesFor(u user.Info, namespace string, visitor func(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool) {
	for _, binding := range a.clusterRoleBindings {
		subjectIndex, applies := appliesTo(u, binding.Subjects, "")
		if !applies {
			continue
		}
		rules, err := a.getRoleReferenceRules(binding.RoleRef, "")
		if err != nil {
			if !visitor(nil, nil, err) {
				return
			}
			continue
		}
		source := &clusterRoleBindingDescriber{binding: binding, subject: &binding.Subjects[subjectIndex]}
		for i := range rules {
			if !visitor(source, &rules[i], nil) {
				return
			}
		}
	}
	if namespace == "" {
		return
	}
	for _, binding := range a.roleBindings {
		if binding.Namespace != namespace {
			continue
		}
		subjectIndex, applies := appliesTo(u, binding.Subjects, namespace)
		if !applies {
			continue
		}
		rules, err := a.getRoleReferenceRules(binding.RoleRef, namespace)
		if err != nil {
			if !visitor(nil, nil, err) {
				return
			}
			continue
		}
		source := &roleBindingDescriber{binding: binding, subject: &binding.Subjects[subjectIndex]}
		for i := range rules {
			if !visitor(source, &rules[i], nil) {
				return
			}
		}
	}
}

// getRoleReferenceRules is DefaultRuleResolver.GetRoleReferenceRules; its not-found errors are the
// listers'.
func (a *rbacAuthorizer) getRoleReferenceRules(roleRef rbacv1.RoleRef, bindingNamespace string) ([]rbacv1.PolicyRule, error) {
	switch roleRef.Kind {
	case "Role":
		role := a.roles[bindingNamespace+"/"+roleRef.Name]
		if role == nil {
			return nil, apierrors.NewNotFound(rbacv1.Resource("role"), roleRef.Name)
		}
		return role.Rules, nil
	case "ClusterRole":
		clusterRole := a.clusterRoles[roleRef.Name]
		if clusterRole == nil {
			return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), roleRef.Name)
		}
		return clusterRole.Rules, nil
	default:
		return nil, fmt.Errorf("unsupported role reference kind: %q", roleRef.Kind)
	}
}

// appliesTo returns whether any of the bindingSubjects applies to the user, and if so the index of
// the first one that does.
func appliesTo(u user.Info, bindingSubjects []rbacv1.Subject, namespace string) (int, bool) {
	for i, subject := range bindingSubjects {
		if appliesToUser(u, subject, namespace) {
			return i, true
		}
	}
	return 0, false
}

func appliesToUser(u user.Info, subject rbacv1.Subject, namespace string) bool {
	switch subject.Kind {
	case rbacv1.UserKind:
		return u.GetName() == subject.Name
	case rbacv1.GroupKind:
		for _, group := range u.GetGroups() {
			if group == subject.Name {
				return true
			}
		}
		return false
	case rbacv1.ServiceAccountKind:
		// A RoleBinding's subject may leave out the namespace: it is the binding's.
		saNamespace := namespace
		if subject.Namespace != "" {
			saNamespace = subject.Namespace
		}
		if saNamespace == "" {
			return false
		}
		return serviceaccount.MatchesUsername(saNamespace, subject.Name, u.GetName())
	default:
		return false
	}
}

func describeSubject(s *rbacv1.Subject, bindingNamespace string) string {
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Namespace != "" {
			return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+s.Namespace)
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+bindingNamespace)
	default:
		return fmt.Sprintf("%s %q", s.Kind, s.Name)
	}
}

type clusterRoleBindingDescriber struct {
	binding *rbacv1.ClusterRoleBinding
	subject *rbacv1.Subject
}

func (d *clusterRoleBindingDescriber) String() string {
	return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s",
		d.binding.Name, d.binding.RoleRef.Kind, d.binding.RoleRef.Name, describeSubject(d.subject, ""))
}

type roleBindingDescriber struct {
	binding *rbacv1.RoleBinding
	subject *rbacv1.Subject
}

func (d *roleBindingDescriber) String() string {
	return fmt.Sprintf("RoleBinding %q of %s %q to %s",
		d.binding.Name+"/"+d.binding.Namespace, d.binding.RoleRef.Kind, d.binding.RoleRef.Name,
		describeSubject(d.subject, d.binding.Namespace))
}

// ruleAllows is RuleAllows (rbac.go).
func ruleAllows(attrs authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if attrs.IsResourceRequest() {
		combinedResource := attrs.GetResource()
		if attrs.GetSubresource() != "" {
			combinedResource = attrs.GetResource() + "/" + attrs.GetSubresource()
		}
		return verbMatches(rule, attrs.GetVerb()) &&
			apiGroupMatches(rule, attrs.GetAPIGroup()) &&
			resourceMatches(rule, combinedResource, attrs.GetSubresource()) &&
			resourceNameMatches(rule, attrs.GetName())
	}
	return verbMatches(rule, attrs.GetVerb()) && nonResourceURLMatches(rule, attrs.GetPath())
}

// The matchers of evaluation_helpers.go.

func verbMatches(rule *rbacv1.PolicyRule, requestedVerb string) bool {
	for _, ruleVerb := range rule.Verbs {
		if ruleVerb == rbacv1.VerbAll || ruleVerb == requestedVerb {
			return true
		}
	}
	return false
}

func apiGroupMatches(rule *rbacv1.PolicyRule, requestedGroup string) bool {
	for _, ruleGroup := range rule.APIGroups {
		if ruleGroup == rbacv1.APIGroupAll || ruleGroup == requestedGroup {
			return true
		}
	}
	return false
}

func resourceMatches(rule *rbacv1.PolicyRule, combinedRequestedResource, requestedSubresource string) bool {
	for _, ruleResource := range rule.Resources {
		if ruleResource == rbacv1.ResourceAll || ruleResource == combinedRequestedResource {
			return true
		}
		// "*/subresource" matches that subresource of any resource.
		if requestedSubresource != "" && len(ruleResource) == len(requestedSubresource)+2 &&
			strings.HasPrefix(ruleResource, "*/") && strings.HasSuffix(ruleResource, requestedSubresource) {
			return true
		}
	}
	return false
}

func resourceNameMatches(rule *rbacv1.PolicyRule, requestedName string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, ruleName := range rule.ResourceNames {
		if ruleName == requestedName {
			return true
		}
	}
	return false
}

func nonResourceURLMatches(rule *rbacv1.PolicyRule, requestedURL string) bool {
	for _, ruleURL := range rule.NonResourceURLs {
		if ruleURL == rbacv1.NonResourceAll || ruleURL == requestedURL {
			return true
		}
		if strings.HasSuffix(ruleURL, "*") && strings.HasPrefix(requestedURL, strings.TrimRight(ruleURL, "*")) {
			return true
		}
	}
	return false
}

// The part of the bootstrap policy (bootstrappolicy/policy.go, clusterRoles and
// ClusterRoleBindings) that every authenticated client relies on: discovery, health and version,
// and the self-reviews.
var bootstrapClusterRoles = []rbacv1.ClusterRole{
	{
		ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{
			"/livez", "/readyz", "/healthz",
			"/version", "/version/",
			"/openapi", "/openapi/*",
			"/api", "/api/*",
			"/apis", "/apis/*",
		}}},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
			{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
		},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{
			"/livez", "/readyz", "/healthz", "/version", "/version/",
		}}},
	},
}

var bootstrapClusterRoleBindings = []rbacv1.ClusterRoleBinding{
	bootstrapBinding("system:discovery", user.AllAuthenticated),
	bootstrapBinding("system:basic-user", user.AllAuthenticated),
	bootstrapBinding("system:public-info-viewer", user.AllAuthenticated, user.AllUnauthenticated),
}

func bootstrapBinding(clusterRole string, groups ...string) rbacv1.ClusterRoleBinding {
	b := rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
	}
	for _, g := range groups {
		b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g})
	}
	return b
}
