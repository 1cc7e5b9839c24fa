// TokenReview and SubjectAccessReview, the two reviews a delegating component (the kubelet's
// webhook authentication and authorization, controller-runtime's metrics server, plegd's
// /metrics) asks the apiserver for. Ported from k8s.io/kubernetes v1.36:
//   pkg/registry/authentication/tokenreview/storage.go (REST.Create)
//   pkg/registry/authorization/subjectaccessreview/rest.go (REST.Create)
//   pkg/registry/authorization/util/helpers.go (NonResourceAttributesFrom, ResourceAttributesFrom)
// with the server's own token authenticator and its RBAC authorizer behind them. Creating either
// needs `create` on the resource, as in kube-apiserver (system:auth-delegator grants both).

package main

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/rest"
)

type tokenReviewREST struct {
	tokens authenticator.Token
}

var _ rest.Creater = &tokenReviewREST{}
var _ rest.Scoper = &tokenReviewREST{}
var _ rest.SingularNameProvider = &tokenReviewREST{}

func (r *tokenReviewREST) New() runtime.Object     { return &authenticationv1.TokenReview{} }
func (r *tokenReviewREST) Destroy()                {}
func (r *tokenReviewREST) NamespaceScoped() bool   { return false }
func (r *tokenReviewREST) GetSingularName() string { return "tokenreview" }

func (r *tokenReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.TokenReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a TokenReview: %#v", obj))
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	if len(review.Spec.Token) == 0 {
		return nil, apierrors.NewBadRequest("token is required for TokenReview in authentication")
	}
	// Upstream: only the server's default audiences are supported here (none were configured).
	response, authenticated, err := r.tokens.AuthenticateToken(ctx, review.Spec.Token)
	review.Status = authenticationv1.TokenReviewStatus{Authenticated: authenticated}
	if err != nil {
		review.Status.Error = err.Error()
	}
	if authenticated && response != nil && response.User != nil {
		u := response.User
		review.Status.User = authenticationv1.UserInfo{
			Username: u.GetName(),
			UID:      u.GetUID(),
			Groups:   u.GetGroups(),
			Extra:    map[string]authenticationv1.ExtraValue{},
		}
		for k, v := range u.GetExtra() {
			review.Status.User.Extra[k] = authenticationv1.ExtraValue(v)
		}
	}
	return review, nil
}

type subjectAccessReviewREST struct {
	authorizer authorizer.Authorizer
}

var _ rest.Creater = &subjectAccessReviewREST{}
var _ rest.Scoper = &subjectAccessReviewREST{}
var _ rest.SingularNameProvider = &subjectAccessReviewREST{}

func (r *subjectAccessReviewREST) New() runtime.Object     { return &authorizationv1.SubjectAccessReview{} }
func (r *subjectAccessReviewREST) Destroy()                {}
func (r *subjectAccessReviewREST) NamespaceScoped() bool   { return false }
func (r *subjectAccessReviewREST) GetSingularName() string { return "subjectaccessreview" }

func (r *subjectAccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SubjectAccessReview: %#v", obj))
	}
	spec := review.Spec
	// Upstream's ValidateSubjectAccessReviewSpec: exactly one of the attributes, and a subject.
	if (spec.ResourceAttributes == nil) == (spec.NonResourceAttributes == nil) {
		return nil, apierrors.NewBadRequest("exactly one of nonResourceAttributes and resourceAttributes must be specified")
	}
	if len(spec.User) == 0 && len(spec.Groups) == 0 {
		return nil, apierrors.NewBadRequest("at least one of user or group must be specified")
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	extra := map[string][]string{}
	for k, v := range spec.Extra {
		extra[k] = []string(v)
	}
	attrs := authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: spec.User, UID: spec.UID, Groups: spec.Groups, Extra: extra},
	}
	if a := spec.NonResourceAttributes; a != nil {
		attrs.Verb, attrs.Path = a.Verb, a.Path
	} else {
		a := spec.ResourceAttributes
		attrs.ResourceRequest = true
		attrs.Verb, attrs.Namespace, attrs.APIGroup, attrs.APIVersion = a.Verb, a.Namespace, a.Group, a.Version
		attrs.Resource, attrs.Subresource, attrs.Name = a.Resource, a.Subresource, a.Name
	}
	decision, reason, err := r.authorizer.Authorize(ctx, attrs)
	review.Status = authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		review.Status.EvaluationError = err.Error()
	}
	return review, nil
}
