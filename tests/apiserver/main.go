// The test apiserver: Kubernetes' own k8s.io/apiserver (1.36) serving pods (with the status
// subresource), namespaces, events.k8s.io events and ValidatingAdmissionPolicies from etcd, so that
// plegd's apiserver half is tested against the real request handling, storage, watch, patch,
// field-validation, managedFields and admission code — not against code written here.
//
// What lives only in k8s.io/kubernetes (not available as a library) is ported in files of its own,
// each naming its upstream source: the pod strategy and defaults (pod_strategy.go), the pod status
// validation (pod_validation.go), the RBAC authorizer (rbac.go). Authentication is by bearer token,
// one identity per token (tokens.go). testhooks.go records requests for the tests and can inject the
// few faults the real server cannot produce on demand.
//
// Started by tests/apiserver/apiserver.sh, which builds it offline from Debian's packages.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/union"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	generatedopenapi "plegd.io/testapiserver/openapi"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

// The internal version of a group is the versioned Go type itself: k8s.io/kubernetes' internal
// types are not available, and the scheme needs no conversion between a type and itself.
func registerGroup(gv schema.GroupVersion, types ...runtime.Object) {
	internal := schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal}
	scheme.AddKnownTypes(gv, types...)
	scheme.AddKnownTypes(internal, types...)
	metav1.AddToGroupVersion(scheme, gv)
}

func init() {
	registerGroup(corev1.SchemeGroupVersion, &corev1.Pod{}, &corev1.PodList{}, &corev1.Namespace{}, &corev1.NamespaceList{})
	registerGroup(eventsv1.SchemeGroupVersion, &eventsv1.Event{}, &eventsv1.EventList{})
	registerGroup(admissionregistrationv1.SchemeGroupVersion,
		&admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyList{},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{})
	registerGroup(authenticationv1.SchemeGroupVersion, &authenticationv1.TokenReview{})
	registerGroup(authorizationv1.SchemeGroupVersion, &authorizationv1.SubjectAccessReview{})
	utilruntime.Must(addPodFieldLabels(scheme))
	utilruntime.Must(addEventFieldLabels(scheme))
	addDefaults(scheme)
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
}

type options struct {
	etcdServers     string
	etcdPrefix      string
	bindAddress     string
	port            int
	certDir         string
	tokens          string
	rbac            string
	maxInFlight     int
	maxMutating     int
	watchCache      bool
	requestLogLimit int
}

func main() {
	var o options
	klog.InitFlags(nil)
	flag.StringVar(&o.etcdServers, "etcd-servers", "http://127.0.0.1:2379", "etcd endpoints, comma separated")
	flag.StringVar(&o.etcdPrefix, "etcd-prefix", "/registry", "key prefix in etcd")
	flag.StringVar(&o.bindAddress, "bind-address", "127.0.0.1", "address to serve on")
	flag.IntVar(&o.port, "secure-port", 6443, "HTTPS port")
	flag.StringVar(&o.certDir, "cert-dir", "", "directory for the self-signed serving certificate")
	flag.StringVar(&o.tokens, "token-file", "", "JSON file of bearer tokens and the identity each stands for (tokens.go)")
	flag.StringVar(&o.rbac, "rbac", "", "comma-separated YAML files of ClusterRoles, Roles and their bindings")
	flag.IntVar(&o.maxInFlight, "max-requests-inflight", 400, "non-mutating requests served at once; more get 429")
	flag.IntVar(&o.maxMutating, "max-mutating-requests-inflight", 200, "mutating requests served at once; more get 429")
	flag.BoolVar(&o.watchCache, "watch-cache", true, "serve lists and watches from the watch cache")
	flag.IntVar(&o.requestLogLimit, "request-log-limit", 100000, "requests kept for /plegd-test/requests")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "test apiserver: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	cfg := genericapiserver.NewRecommendedConfig(codecs)
	cfg.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	cfg.MaxRequestsInFlight = o.maxInFlight
	cfg.MaxMutatingRequestsInFlight = o.maxMutating
	// The plain max-in-flight filter (429 with Retry-After) instead of priority and fairness, which
	// needs the flowcontrol API.
	cfg.FlowControl = nil

	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.BindAddress = net.ParseIP(o.bindAddress)
	serving.BindPort = o.port
	serving.ServerCert.CertDirectory = o.certDir
	serving.ServerCert.PairName = "apiserver"
	if err := serving.MaybeDefaultWithSelfSignedCerts("localhost", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if err := serving.ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return fmt.Errorf("serving: %w", err)
	}

	tokens, err := loadTokens(o.tokens)
	if err != nil {
		return err
	}
	cfg.Authentication.Authenticator = bearertoken.New(tokens)
	rbac, err := loadRBAC(splitList(o.rbac))
	if err != nil {
		return err
	}
	cfg.Authorization.Authorizer = union.New(authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup), rbac)
	cfg.RuleResolver = rbac

	etcd := genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig(o.etcdPrefix, nil))
	etcd.StorageConfig.Transport.ServerList = splitList(o.etcdServers)
	etcd.EnableWatchCache = o.watchCache
	versions := []schema.GroupVersion{corev1.SchemeGroupVersion, eventsv1.SchemeGroupVersion, admissionregistrationv1.SchemeGroupVersion}
	etcd.StorageConfig.Codec = codecs.LegacyCodec(versions...)
	etcd.StorageConfig.EncodeVersioner = schema.GroupVersions(versions)
	if err := etcd.ApplyTo(&cfg.Config); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}

	namer := openapinamer.NewDefinitionNamer(scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title = "plegd test apiserver"
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title = "plegd test apiserver"

	// Admission: the real ValidatingAdmissionPolicy plugin, fed by informers over this server.
	client, err := kubernetes.NewForConfig(cfg.LoopbackClientConfig)
	if err != nil {
		return err
	}
	dynamicClient, err := dynamic.NewForConfig(cfg.LoopbackClientConfig)
	if err != nil {
		return err
	}
	cfg.SharedInformerFactory = informers.NewSharedInformerFactory(client, 10*time.Minute)
	admission := genericoptions.NewAdmissionOptions()
	admission.RecommendedPluginOrder = []string{"ValidatingAdmissionPolicy"}
	admission.DefaultOffPlugins = nil
	if err := admission.ApplyTo(&cfg.Config, cfg.SharedInformerFactory, client, dynamicClient,
		utilfeature.DefaultFeatureGate, cfg.EffectiveVersion); err != nil {
		return fmt.Errorf("admission: %w", err)
	}

	hooks := newTestHooks(o.requestLogLimit, tokens)
	cfg.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return hooks.wrap(genericapiserver.DefaultBuildHandlerChain(hooks.slow(h), c))
	}

	server, err := cfg.Complete().New("plegd-test-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return err
	}
	if err := installAPIs(server, cfg.RESTOptionsGetter, tokens, cfg.Authorization.Authorizer); err != nil {
		return err
	}
	server.AddPostStartHookOrDie("plegd-default-namespaces", func(ctx genericapiserver.PostStartHookContext) error {
		return createDefaultNamespaces(ctx, client)
	})
	return server.PrepareRun().RunWithContext(genericapiserver.SetupSignalContext())
}

// shortNamed gives a storage the short names kubectl resolves through discovery (`kubectl get po`,
// `get ns`, `get ev`), as pkg/registry/core/pod/storage, core/namespace/storage and
// events/event/storage (k8s.io/kubernetes) give theirs.
type shortNamed struct {
	*genericregistry.Store
	names []string
}

func (s shortNamed) ShortNames() []string { return s.names }

func installAPIs(server *genericapiserver.GenericAPIServer, getter generic.RESTOptionsGetter, tokens authenticator.Token, authz authorizer.Authorizer) error {
	core := genericapiserver.NewDefaultAPIGroupInfo("", scheme, metav1.ParameterCodec, codecs)
	pods, podStatus, err := newPodStorage(getter)
	if err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	namespaces, err := newSimpleStorage(getter, namespaceResource)
	if err != nil {
		return fmt.Errorf("namespaces: %w", err)
	}
	core.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{
		"pods": shortNamed{pods, []string{"po"}}, "pods/status": podStatus,
		"namespaces": shortNamed{namespaces, []string{"ns"}},
	}
	if err := server.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &core); err != nil {
		return err
	}

	events := genericapiserver.NewDefaultAPIGroupInfo(eventsv1.GroupName, scheme, metav1.ParameterCodec, codecs)
	eventStorage, err := newSimpleStorage(getter, eventResource)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	events.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"events": shortNamed{eventStorage, []string{"ev"}}}

	admission := genericapiserver.NewDefaultAPIGroupInfo(admissionregistrationv1.GroupName, scheme, metav1.ParameterCodec, codecs)
	policies, err := newSimpleStorage(getter, policyResource)
	if err != nil {
		return fmt.Errorf("validatingadmissionpolicies: %w", err)
	}
	bindings, err := newSimpleStorage(getter, bindingResource)
	if err != nil {
		return fmt.Errorf("validatingadmissionpolicybindings: %w", err)
	}
	admission.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{
		"validatingadmissionpolicies": policies, "validatingadmissionpolicybindings": bindings,
	}
	authentication := genericapiserver.NewDefaultAPIGroupInfo(authenticationv1.GroupName, scheme, metav1.ParameterCodec, codecs)
	authentication.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"tokenreviews": &tokenReviewREST{tokens: tokens}}
	authorization := genericapiserver.NewDefaultAPIGroupInfo(authorizationv1.GroupName, scheme, metav1.ParameterCodec, codecs)
	authorization.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{"subjectaccessreviews": &subjectAccessReviewREST{authorizer: authz}}
	return server.InstallAPIGroups(&events, &admission, &authentication, &authorization)
}

// The namespaces a fresh kube-apiserver creates itself.
func createDefaultNamespaces(ctx context.Context, client kubernetes.Interface) error {
	for _, name := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for {
			_, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
			if err == nil || strings.Contains(err.Error(), "already exists") {
				break
			}
			klog.Infof("creating namespace %s: %v; retrying", name, err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

var _ authorizer.RuleResolver = (*rbacAuthorizer)(nil)
