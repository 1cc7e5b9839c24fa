// Authentication: one bearer token per identity, read from a JSON file at start. Each identity can
// carry what a real authenticator adds, such as the node-name claim of a bound service account token
// (`authentication.kubernetes.io/node-name` in the user's extra), which deploy/admission-policy.yaml
// checks. Every authenticated user is also in system:authenticated, as in kube-apiserver.
//
//	{"tokens": [{"token": "t1", "user": "system:serviceaccount:plegd-system:plegd",
//	  "groups": ["system:serviceaccounts", "system:serviceaccounts:plegd-system"],
//	  "extra": {"authentication.kubernetes.io/node-name": ["node-a"]}}]}
package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

type tokenIdentity struct {
	Token  string              `json:"token"`
	User   string              `json:"user"`
	UID    string              `json:"uid"`
	Groups []string            `json:"groups"`
	Extra  map[string][]string `json:"extra"`
}

type tokenAuthenticator struct{ identities []tokenIdentity }

func loadTokens(path string) (*tokenAuthenticator, error) {
	if path == "" {
		return &tokenAuthenticator{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var file struct {
		Tokens []tokenIdentity `json:"tokens"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	for i, id := range file.Tokens {
		if id.Token == "" || id.User == "" {
			return nil, fmt.Errorf("token file %s: entry %d needs a token and a user", path, i)
		}
	}
	return &tokenAuthenticator{identities: file.Tokens}, nil
}

func (a *tokenAuthenticator) lookup(token string) *tokenIdentity {
	for i := range a.identities {
		if subtle.ConstantTimeCompare([]byte(a.identities[i].Token), []byte(token)) == 1 {
			return &a.identities[i]
		}
	}
	return nil
}

func (a *tokenAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	id := a.lookup(token)
	if id == nil {
		return nil, false, nil
	}
	groups := append(append([]string{}, id.Groups...), user.AllAuthenticated)
	return &authenticator.Response{User: &user.DefaultInfo{Name: id.User, UID: id.UID, Groups: groups, Extra: id.Extra}}, true, nil
}
