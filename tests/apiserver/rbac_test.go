package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// rbacDeployDir is the project's deploy/ directory; PLEGD_DEPLOY_DIR overrides it when the test runs
// from a copy of this package.
func rbacDeployDir() string {
	if dir := os.Getenv("PLEGD_DEPLOY_DIR"); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "deploy")
}

func loadDeployRBAC(t *testing.T) *rbacAuthorizer {
	t.Helper()
	var paths []string
	for _, name := range []string{"base/rbac.yaml", "components/status-writes/rbac-status.yaml", "full/rbac-full-mode.yaml", "components/events/rbac-events.yaml"} {
		paths = append(paths, filepath.Join(rbacDeployDir(), name))
	}
	a, err := loadRBAC(paths)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func serviceAccountUser(namespace, name string) user.Info {
	return &user.DefaultInfo{
		Name:   "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, user.AllAuthenticated},
	}
}

// rbacRequest builds the attributes of a request for what: a path ("/version"), or a resource as
// kubectl writes it, resource[.group][/subresource] ("pods/status", "events.events.k8s.io").
func rbacRequest(u user.Info, namespace, verb, what, name string) authorizer.AttributesRecord {
	if strings.HasPrefix(what, "/") {
		return authorizer.AttributesRecord{User: u, Verb: verb, Path: what}
	}
	a := authorizer.AttributesRecord{User: u, Verb: verb, Namespace: namespace, Name: name, ResourceRequest: true}
	resource, subresource, _ := strings.Cut(what, "/")
	a.Resource, a.APIGroup, _ = strings.Cut(resource, ".")
	a.Subresource = subresource
	return a
}

type rbacCheck struct {
	namespace, verb, what, name string
	allow                       bool
}

func runRBACChecks(t *testing.T, a *rbacAuthorizer, u user.Info, checks []rbacCheck) {
	t.Helper()
	for _, c := range checks {
		decision, reason, err := a.Authorize(context.Background(), rbacRequest(u, c.namespace, c.verb, c.what, c.name))
		if err != nil {
			t.Errorf("%s %s %s %q in %q: %v", u.GetName(), c.verb, c.what, c.name, c.namespace, err)
		}
		if got := decision == authorizer.DecisionAllow; got != c.allow {
			t.Errorf("%s %s %s %q in %q: allowed=%v, want %v (%q)", u.GetName(), c.verb, c.what, c.name, c.namespace, got, c.allow, reason)
		}
		if decision != authorizer.DecisionAllow && decision != authorizer.DecisionNoOpinion {
			t.Errorf("%s %s %s: decision %v", u.GetName(), c.verb, c.what, decision)
		}
	}
}

// What plegd does in each mode, and what it must not be able to do.
var plegdChecks = []rbacCheck{
	{"", "list", "pods", "", true},
	{"", "watch", "pods", "", true},
	{"default", "list", "pods", "", true},
	{"default", "watch", "pods", "", true},
	{"default", "patch", "pods/status", "web-0", true},
	{"default", "delete", "pods", "web-0", true},
	{"default", "create", "events.events.k8s.io", "", true},
	{"default", "patch", "events.events.k8s.io", "web-0.17f", true},

	{"default", "get", "pods", "web-0", false},
	{"", "get", "pods", "", false},
	{"default", "update", "pods/status", "web-0", false},
	{"default", "patch", "pods", "web-0", false},
	{"default", "update", "pods", "web-0", false},
	{"default", "get", "pods/status", "web-0", false},
	{"default", "create", "pods/eviction", "web-0", false},
	{"", "list", "nodes", "", false},
	{"default", "get", "secrets", "token", false},
	{"default", "create", "events", "", false},
	{"default", "update", "events.events.k8s.io", "web-0.17f", false},
	{"default", "list", "pods.apps", "", false},
}

func TestDeployRBACPlegd(t *testing.T) {
	a := loadDeployRBAC(t)
	plegd := serviceAccountUser("plegd-system", "plegd")
	runRBACChecks(t, a, plegd, plegdChecks)

	_, reason, _ := a.Authorize(context.Background(), rbacRequest(plegd, "default", "patch", "pods/status", "web-0"))
	want := `RBAC: allowed by ClusterRoleBinding "plegd-status" of ClusterRole "plegd-status" to ServiceAccount "plegd/plegd-system"`
	if reason != want {
		t.Errorf("reason %q, want %q", reason, want)
	}
}

func TestDeployRBACOtherServiceAccounts(t *testing.T) {
	a := loadDeployRBAC(t)
	var denied []rbacCheck
	for _, c := range plegdChecks {
		c.allow = false
		denied = append(denied, c)
	}
	for _, u := range []user.Info{
		serviceAccountUser("plegd-system", "default"),
		serviceAccountUser("default", "plegd"),
		serviceAccountUser("plegd-system", "plegd-other"),
		&user.DefaultInfo{Name: "plegd", Groups: []string{user.AllAuthenticated}},
		&user.DefaultInfo{Name: "system:serviceaccount:plegd-system:plegd:x", Groups: []string{user.AllAuthenticated}},
	} {
		runRBACChecks(t, a, u, denied)
	}
}

func TestBootstrapDiscovery(t *testing.T) {
	a := loadDeployRBAC(t)
	for _, u := range []user.Info{
		serviceAccountUser("plegd-system", "plegd"),
		&user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}},
	} {
		runRBACChecks(t, a, u, []rbacCheck{
			{"", "get", "/version", "", true},
			{"", "get", "/version/", "", true},
			{"", "get", "/api", "", true},
			{"", "get", "/api/v1", "", true},
			{"", "get", "/apis", "", true},
			{"", "get", "/apis/events.k8s.io/v1", "", true},
			{"", "get", "/openapi/v3", "", true},
			{"", "get", "/readyz", "", true},
			{"", "post", "/version", "", false},
			{"", "get", "/metrics", "", false},
			{"", "get", "/versions", "", false},
			{"", "create", "selfsubjectaccessreviews.authorization.k8s.io", "", true},
			{"", "create", "selfsubjectrulesreviews.authorization.k8s.io", "", true},
		})
	}
	// The reviews that guard plegd's /metrics: plegd's own ClusterRole grants them, discovery does not.
	runRBACChecks(t, a, serviceAccountUser("plegd-system", "plegd"), []rbacCheck{
		{"", "create", "subjectaccessreviews.authorization.k8s.io", "", true},
		{"", "create", "tokenreviews.authentication.k8s.io", "", true},
	})
	runRBACChecks(t, a, &user.DefaultInfo{Name: "alice", Groups: []string{user.AllAuthenticated}}, []rbacCheck{
		{"", "create", "subjectaccessreviews.authorization.k8s.io", "", false},
		{"", "create", "tokenreviews.authentication.k8s.io", "", false},
	})
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	runRBACChecks(t, a, anonymous, []rbacCheck{
		{"", "get", "/version", "", true},
		{"", "get", "/healthz", "", true},
		{"", "get", "/apis", "", false},
		{"", "create", "selfsubjectaccessreviews.authorization.k8s.io", "", false},
	})
}

func writeRBACManifest(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const testRBACManifest = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: everything
rules:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["*"]
  - nonResourceURLs: ["/logs/*"]
    verbs: ["get"]
---
# statuses of every resource, nothing else
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: statuses
rules:
  - apiGroups: [""]
    resources: ["*/status"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: everything
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: everything}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: root}
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: admins}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: statuses
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: statuses}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: watcher}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: one-configmap
  namespace: ns1
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["cm1"]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: one-configmap
  namespace: ns1
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: one-configmap}
subjects:
  - {kind: ServiceAccount, name: app}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: dangling
  namespace: ns1
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: missing}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: dangler}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ignored
  namespace: ns1
`

func TestRulesAsUpstream(t *testing.T) {
	a, err := loadRBAC([]string{writeRBACManifest(t, testRBACManifest)})
	if err != nil {
		t.Fatal(err)
	}
	all := []rbacCheck{
		{"", "list", "nodes", "", true},
		{"ns1", "deletecollection", "deployments.apps", "", true},
		{"ns1", "patch", "pods/status", "p", true},
		{"", "get", "/logs/kube-apiserver.log", "", true},
		{"", "get", "/logs", "", false},
		{"", "post", "/logs/x", "", false},
	}
	runRBACChecks(t, a, &user.DefaultInfo{Name: "root"}, all)
	runRBACChecks(t, a, &user.DefaultInfo{Name: "bob", Groups: []string{"admins"}}, all)
	runRBACChecks(t, a, &user.DefaultInfo{Name: "bob", Groups: []string{"admin"}}, []rbacCheck{{"", "list", "nodes", "", false}})

	runRBACChecks(t, a, &user.DefaultInfo{Name: "watcher"}, []rbacCheck{
		{"ns1", "get", "pods/status", "p", true},
		{"", "get", "nodes/status", "n", true},
		{"ns1", "get", "pods", "p", false},
		{"ns1", "get", "pods/log", "p", false},
		{"ns1", "get", "deployments.apps/status", "d", false},
		{"ns1", "patch", "pods/status", "p", false},
	})

	app := serviceAccountUser("ns1", "app")
	runRBACChecks(t, a, app, []rbacCheck{
		{"ns1", "get", "configmaps", "cm1", true},
		{"ns1", "update", "configmaps", "cm1", true},
		{"ns1", "get", "configmaps", "cm2", false},
		{"ns1", "list", "configmaps", "", false},
		{"ns1", "delete", "configmaps", "cm1", false},
		{"ns2", "get", "configmaps", "cm1", false},
		{"", "get", "configmaps", "cm1", false},
	})
	_, reason, _ := a.Authorize(context.Background(), rbacRequest(app, "ns1", "get", "configmaps", "cm1"))
	if want := `RBAC: allowed by RoleBinding "one-configmap/ns1" of Role "one-configmap" to ServiceAccount "app/ns1"`; reason != want {
		t.Errorf("reason %q, want %q", reason, want)
	}
	runRBACChecks(t, a, serviceAccountUser("ns2", "app"), []rbacCheck{{"ns1", "get", "configmaps", "cm1", false}})

	decision, reason, err := a.Authorize(context.Background(), rbacRequest(&user.DefaultInfo{Name: "dangler"}, "ns1", "get", "pods", "p"))
	if decision != authorizer.DecisionNoOpinion || err != nil || reason != `RBAC: clusterrole.rbac.authorization.k8s.io "missing" not found` {
		t.Errorf("dangling binding: %v %q %v", decision, reason, err)
	}

	resourceRules, nonResourceRules, incomplete, err := a.RulesFor(context.Background(), app, "ns1")
	if err != nil || incomplete || len(resourceRules) != 3 || len(nonResourceRules) != 2 {
		t.Errorf("RulesFor: %d resource rules, %d non-resource rules, %v, %v", len(resourceRules), len(nonResourceRules), incomplete, err)
	}
	if r := resourceRules[2]; len(resourceRules) == 3 && (r.GetResourceNames()[0] != "cm1" || r.GetResources()[0] != "configmaps") {
		t.Errorf("RulesFor: last rule %+v", r)
	}
}

func TestLoadErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, manifest := range []string{
		"kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: x}\nrules: [{verbs: get}]\n",
		"kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: x}\nrules: [{verb: [get]}]\n",
		"kind: Role\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: x}\n",
		"kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1beta1\nmetadata: {name: x}\n",
		"kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: system:discovery}\n",
		"metadata: {name: x}\n",
		"kind: [\n",
		"",
	} {
		path := missing
		if manifest != "" {
			path = writeRBACManifest(t, manifest)
		}
		_, err := loadRBAC([]string{path})
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: error %v, want one naming %s", manifest, err, path)
		}
	}
}
